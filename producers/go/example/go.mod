// The example: a module of its own so the library's module needs no driver. The SQLite driver
// comes from Debian's golang-github-mattn-go-sqlite3-dev (/usr/share/gocode/src), resolved
// offline through the replace directive; elsewhere drop that line and let `go mod tidy` fetch it.
module github.com/outboxd/outboxd/producers/go/example

go 1.19

require (
	github.com/mattn/go-sqlite3 v1.14.16
	github.com/outboxd/outboxd/producers/go v0.0.0
)

replace (
	github.com/mattn/go-sqlite3 => /usr/share/gocode/src/github.com/mattn/go-sqlite3
	github.com/outboxd/outboxd/producers/go => ../
)
