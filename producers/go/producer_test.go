package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"
)

// begin opens a transaction on the fake.
func begin(t *testing.T, f *fakeDB) *sql.Tx {
	t.Helper()
	tx, err := f.open().Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// events returns n valid events of tenant app with ids prefix-0 … prefix-(n-1).
func events(app, prefix string, n int) []Event {
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{AppCode: app, EventID: fmt.Sprintf("%s-%d", prefix, i), EventType: "RoomHeatChanged",
			RoomID: "room-1", RoomVersion: int64(i), OccurredAt: time.UnixMilli(1_700_000_000_000), Body: []byte{byte(i)}}
	}
	return out
}

// MySQL counts the new rows right whether the driver reports duplicates as affected
// (CLIENT_FOUND_ROWS) or not.
func TestMySQLInsertedCountWithAndWithoutFoundRows(t *testing.T) {
	for _, foundRows := range []bool{false, true} {
		t.Run(fmt.Sprintf("foundRows=%v", foundRows), func(t *testing.T) {
			f := &fakeDB{foundRows: foundRows}
			tx := begin(t, f)
			p, _ := New(MySQL, "")
			ctx := context.Background()
			first := append(events("live", "a", 3), events("default", "b", 2)...)
			if n, err := p.EnqueueBatch(ctx, tx, first); n != 5 || err != nil {
				t.Fatalf("first batch: %d, %v", n, err)
			}
			// Two ids already stored, one repeated inside the batch, two new.
			again := []Event{first[0], first[3], events("live", "c", 1)[0], events("default", "c", 1)[0], first[0]}
			if n, err := p.EnqueueBatch(ctx, tx, again); n != 2 || err != nil {
				t.Fatalf("second batch: %d, %v, want 2", n, err)
			}
			if ok, err := p.Enqueue(ctx, tx, first[1]); ok || err != nil {
				t.Fatalf("duplicate Enqueue: %v, %v, want false", ok, err)
			}
			if ok, err := p.Enqueue(ctx, tx, events("live", "d", 1)[0]); !ok || err != nil {
				t.Fatalf("new Enqueue: %v, %v, want true", ok, err)
			}
			// One COUNT per tenant per INSERT.
			if selects, inserts := f.counts(); selects != 6 || inserts != 4 {
				t.Fatalf("%d selects, %d inserts; want 6, 4", selects, inserts)
			}
		})
	}
}

func TestPostgresAndSQLiteTrustTheAffectedCount(t *testing.T) {
	for _, d := range []Dialect{Postgres, SQLite} {
		f := &fakeDB{}
		tx := begin(t, f)
		p, _ := New(d, "outbox_x")
		batch := events("live", "a", 4)
		if n, err := p.EnqueueBatch(context.Background(), tx, append(batch, batch[2])); n != 4 || err != nil {
			t.Fatalf("%v: %d, %v", d, n, err)
		}
		if n, _ := p.EnqueueBatch(context.Background(), tx, batch[1:]); n != 0 {
			t.Fatalf("%v: duplicates counted %d", d, n)
		}
		if selects, inserts := f.counts(); selects != 0 || inserts != 2 {
			t.Fatalf("%v: %d selects, %d inserts", d, selects, inserts)
		}
	}
}

func TestBatchesAreSplitIntoChunks(t *testing.T) {
	for _, d := range []Dialect{MySQL, Postgres, SQLite} {
		f := &fakeDB{foundRows: true}
		tx := begin(t, f)
		p, _ := New(d, "")
		batch := events("live", "a", 1200)
		if n, err := p.EnqueueBatch(context.Background(), tx, batch); n != 1200 || err != nil {
			t.Fatalf("%v: %d, %v", d, n, err)
		}
		per := d.rowsPerInsert()
		want := (1200 + per - 1) / per
		if len(f.inserts) != want {
			t.Fatalf("%v: %d INSERTs, want %d", d, len(f.inserts), want)
		}
		for i, args := range f.inserts {
			rows := len(args) / placeholdersPerRow
			if rows > per || (i < want-1 && rows != per) {
				t.Fatalf("%v: INSERT %d has %d rows (chunk %d)", d, i, rows, per)
			}
		}
	}
}

func TestRepeatedIDInABatchKeepsTheFirst(t *testing.T) {
	f := &fakeDB{}
	tx := begin(t, f)
	p, _ := New(SQLite, "")
	a := events("live", "same", 1)[0]
	b := a
	b.Body = []byte("second")
	other := a
	other.AppCode = "other" // same id, other tenant: a different row
	if n, err := p.EnqueueBatch(context.Background(), tx, []Event{a, b, other}); n != 2 || err != nil {
		t.Fatalf("%d, %v", n, err)
	}
	want, _ := prepare(context.Background(), 0, a, 0, nil)
	if got := f.keys[[2]string{"live", "same-0"}]; string(got) != string(want.envelope) {
		t.Fatalf("stored envelope %x, want the first event's %x", got, want.envelope)
	}
}

func TestInvalidEventWritesNothing(t *testing.T) {
	f := &fakeDB{}
	tx := begin(t, f)
	p, _ := New(MySQL, "")
	batch := events("live", "a", 3)
	batch[2].RoomID = ""
	n, err := p.EnqueueBatch(context.Background(), tx, batch)
	var fe *FieldError
	if n != 0 || !errors.As(err, &fe) || fe.Index != 2 || fe.Field != "room_id" || fe.EventID != "a-2" {
		t.Fatalf("%d, %v", n, err)
	}
	if len(f.statements) != 0 {
		t.Fatalf("statements ran: %v", f.statements)
	}
}

func TestEmptyBatchAndNilTx(t *testing.T) {
	p, _ := New(Postgres, "")
	if n, err := p.EnqueueBatch(context.Background(), nil, nil); n != 0 || err != nil {
		t.Fatalf("empty batch: %d, %v", n, err)
	}
	if _, err := p.Enqueue(context.Background(), nil, events("a", "b", 1)[0]); err == nil {
		t.Fatal("nil tx accepted")
	}
}

func TestDatabaseErrorsAreWrapped(t *testing.T) {
	cause := errors.New("disk full")
	f := &fakeDB{insertErr: cause}
	tx := begin(t, f)
	p, _ := New(Postgres, "my_outbox")
	_, err := p.Enqueue(context.Background(), tx, events("live", "x", 1)[0])
	if !errors.Is(err, cause) || err.Error() != `outbox: insert 1 row(s) into my_outbox (first event id "x-0"): disk full` {
		t.Fatalf("error %v", err)
	}
}

func TestGeneratedFieldsReachTheRow(t *testing.T) {
	f := &fakeDB{}
	tx := begin(t, f)
	p, _ := New(SQLite, "")
	before := time.Now().UnixMilli()
	if ok, err := p.Enqueue(context.Background(), tx, Event{EventType: "RoomMicChanged", RoomID: "r"}); !ok || err != nil {
		t.Fatalf("%v, %v", ok, err)
	}
	args := f.inserts[0]
	id, created := args[1].Value.(string), args[5].Value.(int64)
	if args[0].Value != "default" || !eventIDPattern.MatchString(id) || created < before || args[6].Value != created {
		t.Fatalf("row args %v", args)
	}
	if got := NewEventID(created)[:17]; id[:17] != got {
		t.Fatalf("id %q is not of created_at_ms %d", id, created)
	}
}
