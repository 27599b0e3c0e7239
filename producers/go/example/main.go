// Command example writes one RoomGiftSent event into the outbox table of a SQLite database that
// `outboxd migrate` made, inside a transaction, and prints the event's id:
//
//	go run . ../../../target/demo/outboxd.db
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/mattn/go-sqlite3"

	outbox "github.com/outboxd/outboxd/producers/go"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: example <sqlite file made by `outboxd migrate`>")
		os.Exit(2)
	}
	id, err := run(context.Background(), os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
	fmt.Println(id)
}

// run writes the event into the database at path and returns its id.
func run(ctx context.Context, path string) (string, error) {
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%w (create the table first: outboxd --config <file> migrate)", err)
	}
	// mode=rw: never create an empty file by mistake.
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=rw&_busy_timeout=5000")
	if err != nil {
		return "", err
	}
	defer db.Close()

	producer, err := outbox.New(outbox.SQLite, "") // the default table, room_outbox
	if err != nil {
		return "", err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() // a no-op after Commit

	// ... the business change goes here, on tx ...
	body := []byte(`{"gift":"rose","from":"u1","to":"u2","count":1}`) // usually a protobuf message
	event := outbox.Build("room-42", "RoomGiftSent", 7, time.Now(), body)
	if _, err := producer.Enqueue(ctx, tx, event); err != nil {
		return "", err
	}
	if err := tx.Commit(); err != nil {
		return "", err
	}
	return event.EventID, nil
}
