package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	outbox "github.com/outboxd/outboxd/producers/go"
)

// giftSent writes event inside one transaction of db with the business change, and reports
// whether its row is new.
func giftSent(ctx context.Context, db *sql.DB, producer *outbox.Producer, event outbox.Event) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() // a no-op after Commit
	// ... the business change goes here, on tx: tx.ExecContext(ctx, "UPDATE room ...") ...
	inserted, err := producer.Enqueue(ctx, tx, event)
	if err != nil {
		return false, err
	}
	return inserted, tx.Commit()
}

func ExampleProducer_Enqueue() {
	producer, err := outbox.New(outbox.MySQL, "") // room_outbox
	if err != nil {
		panic(err)
	}
	// A program opens its database with its driver: sql.Open("mysql", dsn). This example runs
	// on the package tests' in-memory stand-in for a MySQL outbox table.
	db, err := sql.Open("outbox-fake", "ExampleProducer_Enqueue")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	event := outbox.Build("room-42", "RoomGiftSent", 7, time.Now(), []byte(`{"gift":"rose"}`))
	event.AppCode = "live"
	// A retry of the same event (same AppCode and EventID) keeps the row already written.
	for _, attempt := range []string{"first", "retry"} {
		inserted, err := giftSent(context.Background(), db, producer, event)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: inserted=%v\n", attempt, inserted)
	}
	// Output:
	// first: inserted=true
	// retry: inserted=false
}

func ExampleNewEventID() {
	id := outbox.NewEventID(1_700_000_000_000) // 2023-11-14T22:13:20Z
	fmt.Println(id[:17], len(id))
	// Output: evt_0018bcfe56800 33
}
