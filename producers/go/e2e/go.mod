// The end-to-end tests: a module of their own so the library's module needs no driver. The
// drivers come from Debian's golang-*-dev packages (/usr/share/gocode/src), resolved offline
// through the replace directives; ../test.sh installs them.
module github.com/outboxd/outboxd/producers/go/e2e

go 1.19

require (
	github.com/go-sql-driver/mysql v1.5.0
	github.com/lib/pq v1.10.7
	github.com/mattn/go-sqlite3 v1.14.16
	github.com/outboxd/outboxd/producers/go v0.0.0
)

replace (
	github.com/go-sql-driver/mysql => /usr/share/gocode/src/github.com/go-sql-driver/mysql
	github.com/lib/pq => /usr/share/gocode/src/github.com/lib/pq
	github.com/mattn/go-sqlite3 => /usr/share/gocode/src/github.com/mattn/go-sqlite3
	github.com/outboxd/outboxd/producers/go => ../
)
