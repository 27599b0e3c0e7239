package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	outbox "github.com/outboxd/outboxd/producers/go"
)

// giftSent writes a business change and its event in one transaction of db (opened with any
// MySQL driver).
func giftSent(ctx context.Context, db *sql.DB, producer *outbox.Producer, body []byte) (string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "UPDATE room SET version = ? WHERE id = ?", 7, "room-42"); err != nil {
		return "", err
	}
	event := outbox.Build("room-42", "RoomGiftSent", 7, time.Now(), body)
	event.AppCode = "live"
	if _, err := producer.Enqueue(ctx, tx, event); err != nil {
		return "", err
	}
	return event.EventID, tx.Commit()
}

func ExampleProducer_Enqueue() {
	producer, err := outbox.New(outbox.MySQL, "") // room_outbox
	if err != nil {
		panic(err)
	}
	var db *sql.DB // sql.Open("mysql", dsn) with the driver of your choice
	if db != nil {
		_, _ = giftSent(context.Background(), db, producer, []byte(`{"gift":"rose"}`))
	}
}

func ExampleNewEventID() {
	id := outbox.NewEventID(1_700_000_000_000) // 2023-11-14T22:13:20Z
	fmt.Println(id[:17], len(id))
	// Output: evt_0018bcfe56800 33
}
