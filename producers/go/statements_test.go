package outbox

import (
	"reflect"
	"strings"
	"testing"
)

// twoRows are rows for the statement tests.
var twoRows = []row{
	{appCode: "a", eventID: "e1", eventType: "T", roomID: "r1", envelope: []byte{1}, createdAtMS: 10},
	{appCode: "b", eventID: "e2", eventType: "U", roomID: "r2", envelope: []byte{2}, createdAtMS: 20},
}

func TestInsertStatementPerDialect(t *testing.T) {
	head := "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, status, envelope, created_at_ms, " +
		"retry_count, last_error, worker_id, lock_until_ms, next_retry_at_ms, updated_at_ms) VALUES "
	q := "(?, ?, ?, ?, 'pending', ?, ?, 0, NULL, '', NULL, 0, ?)"
	want := map[Dialect]string{
		MySQL:  head + q + ", " + q + " ON DUPLICATE KEY UPDATE event_id = event_id",
		SQLite: head + q + ", " + q + " ON CONFLICT (app_code, event_id) DO NOTHING",
		Postgres: head + "($1, $2, $3, $4, 'pending', $5, $6, 0, NULL, '', NULL, 0, $7), " +
			"($8, $9, $10, $11, 'pending', $12, $13, 0, NULL, '', NULL, 0, $14)" +
			" ON CONFLICT (app_code, event_id) DO NOTHING",
	}
	wantArgs := []interface{}{"a", "e1", "T", "r1", []byte{1}, int64(10), int64(10),
		"b", "e2", "U", "r2", []byte{2}, int64(20), int64(20)}
	for d, sql := range want {
		got, args := insertStatement(d, "room_outbox", twoRows)
		if got != sql {
			t.Errorf("%v insert\n got %s\nwant %s", d, got, sql)
		}
		if !reflect.DeepEqual(args, wantArgs) {
			t.Errorf("%v args %v", d, args)
		}
	}
}

func TestCountExistingStatementPerDialect(t *testing.T) {
	want := map[Dialect]string{
		MySQL:    "SELECT COUNT(*) FROM t1 WHERE app_code = ? AND event_id IN (?, ?, ?)",
		SQLite:   "SELECT COUNT(*) FROM t1 WHERE app_code = ? AND event_id IN (?, ?, ?)",
		Postgres: "SELECT COUNT(*) FROM t1 WHERE app_code = $1 AND event_id IN ($2, $3, $4)",
	}
	for d, sql := range want {
		got, args := countExistingStatement(d, "t1", "live", []string{"x", "y", "z"})
		if got != sql || !reflect.DeepEqual(args, []interface{}{"live", "x", "y", "z"}) {
			t.Errorf("%v: %s %v", d, got, args)
		}
	}
}

func TestRowsPerInsertStayUnderPlaceholderLimits(t *testing.T) {
	limits := map[Dialect]int{MySQL: 65535, Postgres: 65535, SQLite: 999}
	for d, limit := range limits {
		if n := d.rowsPerInsert() * placeholdersPerRow; n > limit || d.rowsPerInsert() < 100 {
			t.Errorf("%v: %d rows = %d placeholders, limit %d", d, d.rowsPerInsert(), n, limit)
		}
	}
}

func TestNewChecksDialectAndTable(t *testing.T) {
	p, err := New(Postgres, "")
	if err != nil || p.Table() != "room_outbox" || p.Dialect() != Postgres || p.Dialect().String() != "postgres" {
		t.Fatalf("New(Postgres, \"\") = %+v, %v", p, err)
	}
	for _, ok := range []string{"outbox_2", "_x", "A", strings.Repeat("t", 48)} {
		if _, err := New(SQLite, ok); err != nil {
			t.Errorf("table %q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"2outbox", "room outbox", "room_outbox;drop", "public.room_outbox", "\"t\"", "tãble", strings.Repeat("t", 49)} {
		if _, err := New(MySQL, bad); err == nil || !strings.Contains(err.Error(), "plain SQL identifier") {
			t.Errorf("table %q: err %v", bad, err)
		}
	}
	if _, err := New(Dialect(0), ""); err == nil || !strings.Contains(err.Error(), "unknown dialect Dialect(0)") {
		t.Errorf("zero dialect: %v", err)
	}
}
