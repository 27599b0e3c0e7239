package outbox

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Producer writes outbox rows into one table of one kind of database. It holds no connection
// and is safe for concurrent use; make one at startup (setting TraceContext, if wanted, before
// the first Enqueue) and share it.
type Producer struct {
	// TraceContext, when not nil, gives the W3C Trace Context of the events that have no
	// TraceParent of their own: Enqueue and EnqueueBatch call it with their ctx, once for each
	// such event, and write what it returns into the envelope as if the event had carried it
	// (both empty: no trace context). Usually it reads the current span from ctx through the
	// application's tracing library (the README shows it for go.opentelemetry.io/otel). Its
	// tracestate is taken as a span's: one over 512 characters is cut to fit by dropping whole
	// list members, as W3C Trace Context recommends (those over 128 characters first, then from
	// the end), and one that is not printable ASCII is dropped, never refusing the event. A
	// traceparent that is not W3C Trace Context, or a tracestate without a traceparent, refuses
	// the event with a *FieldError (an event's own TraceState is not cut: it is refused when too
	// long). It is called from the goroutines that enqueue, so it must be safe for concurrent use.
	TraceContext func(ctx context.Context) (traceparent, tracestate string)

	dialect Dialect
	table   string
}

// New returns a Producer for the given dialect writing into table, a plain SQL identifier
// (empty means DefaultTable, room_outbox).
func New(dialect Dialect, table string) (*Producer, error) {
	if err := dialect.valid(); err != nil {
		return nil, err
	}
	if table == "" {
		table = DefaultTable
	}
	if err := checkTableName(table); err != nil {
		return nil, err
	}
	return &Producer{dialect: dialect, table: table}, nil
}

// Dialect returns the dialect the producer writes.
func (p *Producer) Dialect() Dialect { return p.dialect }

// Table returns the name of the table the producer writes into.
func (p *Producer) Table() string { return p.table }

// Enqueue writes event as a 'pending' row inside tx, the transaction of the business change, and
// reports whether a row was inserted: false when a row with the same (AppCode, EventID) already
// exists (it is kept as it was). The row becomes visible to the host when tx commits. An event
// without a TraceParent gets the trace context of p.TraceContext(ctx), when set.
func (p *Producer) Enqueue(ctx context.Context, tx *sql.Tx, event Event) (inserted bool, err error) {
	n, err := p.EnqueueBatch(ctx, tx, []Event{event})
	return n == 1, err
}

// EnqueueBatch writes events as 'pending' rows inside tx and returns how many rows were
// inserted. Events whose (AppCode, EventID) is already in the table, or repeats one earlier in
// events, are skipped (the first wins). Events without a TraceParent get the trace context of
// p.TraceContext(ctx), when set. Every event is checked before anything is written: a
// *FieldError names the first event and field that do not fit. On a database error the
// statements of this call may be partly applied: roll tx back.
func (p *Producer) EnqueueBatch(ctx context.Context, tx *sql.Tx, events []Event) (inserted int, err error) {
	if len(events) == 0 {
		return 0, nil
	}
	if tx == nil {
		return 0, errors.New("outbox: Enqueue needs the caller's transaction, got a nil *sql.Tx")
	}
	nowMS := time.Now().UnixMilli()
	rows := make([]row, 0, len(events))
	seen := make(map[[2]string]bool, len(events))
	for i, event := range events {
		r, err := prepare(ctx, i, event, nowMS, p.TraceContext)
		if err != nil {
			return 0, err
		}
		key := [2]string{r.appCode, r.eventID}
		if !seen[key] {
			seen[key] = true
			rows = append(rows, r)
		}
	}
	for start := 0; start < len(rows); start += p.dialect.rowsPerInsert() {
		end := start + p.dialect.rowsPerInsert()
		if end > len(rows) {
			end = len(rows)
		}
		n, err := p.insertChunk(ctx, tx, rows[start:end])
		if err != nil {
			return inserted, err
		}
		inserted += n
	}
	return inserted, nil
}
