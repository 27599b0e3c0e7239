// Package outbox writes outboxd outbox rows inside the caller's own database transaction.
//
// A producer service builds its events and enqueues them in the same *sql.Tx as its business
// change; once the transaction commits, the outboxd host delivers them to the configured sinks.
// The rows and their protobuf envelopes (outbox.v1.EventEnvelope) are byte-compatible with the
// host and with the other producer libraries (producers/SPEC.md in the outboxd repository).
//
//	producer, err := outbox.New(outbox.MySQL, "") // "" = the default table, room_outbox
//	...
//	tx, err := db.BeginTx(ctx, nil)
//	... // the business change
//	event := outbox.Build("room-42", "RoomGiftSent", 7, time.Now(), body)
//	if _, err := producer.Enqueue(ctx, tx, event); err != nil { ... }
//	err = tx.Commit()
//
// An event may carry the W3C Trace Context of the producer's span (Event.TraceParent and
// Event.TraceState), given on the event or taken from the enqueue call's ctx by
// Producer.TraceContext, a hook the application fills from its tracing library.
//
// The library works with any database/sql driver and has no dependencies beyond the standard
// library: the driver is the caller's choice (github.com/go-sql-driver/mysql, github.com/lib/pq,
// github.com/jackc/pgx/v5/stdlib, github.com/mattn/go-sqlite3, modernc.org/sqlite, ...).
package outbox
