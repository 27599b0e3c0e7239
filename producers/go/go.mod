module github.com/outboxd/outboxd/producers/go

go 1.19
