package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"testing"
	"time"

	outbox "github.com/outboxd/outboxd/producers/go"
)

func TestSQLite(t *testing.T)   { roundTrip(t, sqliteDB) }
func TestMariaDB(t *testing.T)  { roundTrip(t, mariaDB) }
func TestPostgres(t *testing.T) { roundTrip(t, postgresDB) }

// generatedID is the shape of an id the library makes.
var generatedID = regexp.MustCompile(`^evt_[0-9a-f]{29}$`)

// roundTrip writes events with the library into a fresh database, has the real host deliver them
// through the webhook plugin, and checks every field received and every row's final status.
func roundTrip(t *testing.T, fresh func(*testing.T) *testDB) {
	hostFiles(t) // skip (or fail in CI) before touching a database when the host is not built
	d := fresh(t)
	hook := newReceiver(t)
	h := newHost(t, d.hostURL, appCodes, hook.URL)
	h.run(t, "migrate")
	d.connect(t)
	p, err := outbox.New(d.dialect, "")
	if err != nil {
		t.Fatal(err)
	}
	p.TraceContext = currentSpan
	ctx := context.Background()
	var want []expected

	// 1. A business row and 51 events in one transaction: both visible after the commit. The
	//    batch is written in a span: its events without a trace context of their own get it.
	gift := outbox.Build("room-1", "RoomGiftSent", 1, time.Now(), []byte(`{"gift":"rose","from":"u1","to":"u2"}`))
	gift.AppCode = "live"
	batch := batchEvents(50)
	tx := begin(t, d.db)
	businessRow(t, tx, "order-1")
	if ok, err := p.Enqueue(ctx, tx, gift); !ok || err != nil {
		t.Fatalf("Enqueue: %v, %v", ok, err)
	}
	before := time.Now().UnixMilli()
	if n, err := p.EnqueueBatch(withSpan(ctx, spanTraceparent, spanTracestate), tx, batch); n != len(batch) || err != nil {
		t.Fatalf("EnqueueBatch: %d, %v; want %d", n, err, len(batch))
	}
	after := time.Now().UnixMilli()
	commit(t, tx)
	want = append(want, expected{event: gift})
	for _, e := range batch {
		w := expected{event: e, generatedID: e.EventID == "", nowMin: before, nowMax: after,
			traceparent: e.TraceParent, tracestate: e.TraceState}
		if e.TraceParent == "" {
			w.traceparent, w.tracestate = spanTraceparent, spanTracestate
		}
		want = append(want, w)
	}
	if got := count(t, d.db, "SELECT COUNT(*) FROM gift_order WHERE id = 'order-1'"); got != 1 {
		t.Fatalf("business row committed with the events: %d rows", got)
	}
	if got := count(t, d.db, "SELECT COUNT(*) FROM room_outbox"); got != len(want) {
		t.Fatalf("%d outbox rows after the commit, want %d", got, len(want))
	}

	// 2. A rolled-back transaction writes neither its business row nor its event.
	tx = begin(t, d.db)
	businessRow(t, tx, "order-2")
	lost := outbox.Build("room-1", "RoomGiftSent", 2, time.Now(), []byte("never"))
	lost.EventID = "rolled-back-1"
	if ok, err := p.Enqueue(ctx, tx, lost); !ok || err != nil {
		t.Fatalf("Enqueue in the rolled-back tx: %v, %v", ok, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := count(t, d.db, "SELECT COUNT(*) FROM gift_order WHERE id = 'order-2'"); got != 0 {
		t.Fatal("the rolled-back business row is there")
	}
	if got := count(t, d.db, "SELECT COUNT(*) FROM room_outbox WHERE event_id = 'rolled-back-1'"); got != 0 {
		t.Fatal("the rolled-back event is there")
	}

	// 3. Ids already written count 0, on every kind of connection (MySQL: with and without
	//    CLIENT_FOUND_ROWS); one new event per connection, repeated in its batch, counts 1.
	for i, db := range append([]*sql.DB{d.db}, d.others...) {
		tx := begin(t, db)
		if ok, err := p.Enqueue(ctx, tx, gift); ok || err != nil {
			t.Fatalf("connection %d: duplicate Enqueue: %v, %v; want false", i, ok, err)
		}
		fresh := outbox.Build("room-3", "RoomHeatChanged", int64(5000+i), time.Now(), []byte(fmt.Sprint("heat ", i)))
		var again []outbox.Event
		for _, e := range batch[5:15] {
			if e.EventID != "" { // an empty id is a new event each time
				again = append(again, e)
			}
		}
		again = append(again, fresh, gift, fresh)
		if n, err := p.EnqueueBatch(ctx, tx, again); n != 1 || err != nil {
			t.Fatalf("connection %d: batch of duplicates and one new event: %d, %v; want 1", i, n, err)
		}
		commit(t, tx)
		want = append(want, expected{event: fresh})
	}
	if got := count(t, d.db, "SELECT COUNT(*) FROM room_outbox"); got != len(want) {
		t.Fatalf("%d outbox rows, want %d", got, len(want))
	}

	// 4. The host delivers everything through the webhook plugin.
	h.run(t, "run", "--drain")
	received, problems := hook.snapshot()
	for _, p := range problems {
		t.Errorf("webhook: %s", p)
	}
	checkDeliveries(t, want, received)
	checkRowsDelivered(t, d.db, received)
	checkTraceContexts(t, d.db, want, received)
	checkTraceHeaders(t, hook, want, received)
}

// checkDeliveries checks that each event arrived exactly once, field by field as written.
func checkDeliveries(t *testing.T, want []expected, received []delivery) {
	t.Helper()
	byID := map[string]delivery{}
	byKey := map[string]delivery{}
	for _, d := range received {
		if _, dup := byID[d.AppCode+"/"+d.EventID]; dup {
			t.Errorf("event %s/%s delivered twice", d.AppCode, d.EventID)
		}
		byID[d.AppCode+"/"+d.EventID] = d
		byKey[fmt.Sprintf("%s/%s/%d", d.AppCode, d.RoomID, d.RoomVersion)] = d
	}
	if len(received) != len(want) {
		t.Errorf("received %d events, want %d", len(received), len(want))
	}
	for _, w := range want {
		e := w.event
		got, ok := byKey[w.key()]
		if !ok {
			t.Errorf("event %s (%q) not delivered", w.key(), e.EventID)
			continue
		}
		appCode := e.AppCode
		if appCode == "" {
			appCode = outbox.DefaultAppCode
		}
		wantMS := e.OccurredAt.UnixMilli()
		if e.OccurredAt.IsZero() {
			if got.OccurredAtMS < w.nowMin || got.OccurredAtMS > w.nowMax {
				t.Errorf("%s: occurred_at_ms %d is not the time of writing [%d, %d]", w.key(), got.OccurredAtMS, w.nowMin, w.nowMax)
			}
			wantMS = got.OccurredAtMS
		}
		wantID := e.EventID
		if w.generatedID {
			if !generatedID.MatchString(got.EventID) || got.EventID[:17] != outbox.NewEventID(wantMS)[:17] {
				t.Errorf("%s: generated id %q is not an id of ms %d", w.key(), got.EventID, wantMS)
			}
			wantID = got.EventID
		}
		mismatch := []string{}
		check := func(field string, got, want interface{}) {
			if fmt.Sprint(got) != fmt.Sprint(want) {
				mismatch = append(mismatch, fmt.Sprintf("%s = %v, want %v", field, got, want))
			}
		}
		check("app_code", got.AppCode, appCode)
		check("event_id", got.EventID, wantID)
		check("event_type", got.EventType, e.EventType)
		check("room_id", got.RoomID, e.RoomID)
		check("room_version", got.RoomVersion, e.RoomVersion)
		check("occurred_at_ms", got.OccurredAtMS, wantMS)
		check("attempt", got.Attempt, 1)
		if !bytes.Equal(got.Body, e.Body) {
			mismatch = append(mismatch, fmt.Sprintf("body = %d bytes %.40x…, want %d bytes %.40x…", len(got.Body), got.Body, len(e.Body), e.Body))
		}
		for _, m := range mismatch {
			t.Errorf("%s: %s", w.key(), m)
		}
	}
}

// checkRowsDelivered checks that every row ended 'delivered' and matches a delivery
// (created_at_ms = occurred_at_ms, the columns = the envelope's fields).
func checkRowsDelivered(t *testing.T, db *sql.DB, received []delivery) {
	t.Helper()
	byID := map[string]delivery{}
	for _, d := range received {
		byID[d.AppCode+"/"+d.EventID] = d
	}
	rows, err := db.Query("SELECT app_code, event_id, event_type, room_id, status, created_at_ms, updated_at_ms >= created_at_ms FROM room_outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var appCode, eventID, eventType, roomID, status string
		var createdAtMS int64
		var updatedLater bool
		if err := rows.Scan(&appCode, &eventID, &eventType, &roomID, &status, &createdAtMS, &updatedLater); err != nil {
			t.Fatal(err)
		}
		n++
		d, ok := byID[appCode+"/"+eventID]
		switch {
		case status != "delivered":
			t.Errorf("row %s/%s ended %q", appCode, eventID, status)
		case !ok:
			t.Errorf("row %s/%s was never received", appCode, eventID)
		case d.EventType != eventType || d.RoomID != roomID || d.OccurredAtMS != createdAtMS || !updatedLater:
			t.Errorf("row %s/%s (%s, %s, %d) differs from its envelope %+v", appCode, eventID, eventType, roomID, createdAtMS, d)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(received) {
		t.Errorf("%d rows, %d deliveries", n, len(received))
	}
	t.Logf("%d rows delivered", n)
}

// begin starts a transaction, rolled back at the end of the test unless committed.
func begin(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// commit commits tx or fails the test.
func commit(t *testing.T, tx *sql.Tx) {
	t.Helper()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// businessRow inserts the test's business change.
func businessRow(t *testing.T, tx *sql.Tx, id string) {
	t.Helper()
	if _, err := tx.Exec("INSERT INTO gift_order (id, amount) VALUES ('" + id + "', 520)"); err != nil {
		t.Fatal(err)
	}
}

// count runs a COUNT(*) query.
func count(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
