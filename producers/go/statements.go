package outbox

import "strings"

// insertColumns are the columns of a new row, in the order of the VALUES tuples.
const insertColumns = "app_code, event_id, event_type, room_id, status, envelope, created_at_ms, " +
	"retry_count, last_error, worker_id, lock_until_ms, next_retry_at_ms, updated_at_ms"

// placeholdersPerRow is the number of values bound per inserted row.
const placeholdersPerRow = 7

// insertStatement returns the multi-row INSERT of rows as 'pending' rows, keeping rows already
// present, and its arguments.
func insertStatement(d Dialect, table string, rows []row) (string, []interface{}) {
	var sql strings.Builder
	args := make([]interface{}, 0, len(rows)*placeholdersPerRow)
	sql.WriteString("INSERT INTO " + table + " (" + insertColumns + ") VALUES ")
	for i, r := range rows {
		if i > 0 {
			sql.WriteString(", ")
		}
		n := len(args)
		sql.WriteString("(" + d.placeholder(n+1) + ", " + d.placeholder(n+2) + ", " +
			d.placeholder(n+3) + ", " + d.placeholder(n+4) + ", 'pending', " + d.placeholder(n+5) +
			", " + d.placeholder(n+6) + ", 0, NULL, '', NULL, 0, " + d.placeholder(n+7) + ")")
		args = append(args, r.appCode, r.eventID, r.eventType, r.roomID, r.envelope, r.createdAtMS, r.createdAtMS)
	}
	sql.WriteString(d.ignoreDuplicateKey())
	return sql.String(), args
}

// countExistingStatement returns the query counting which of eventIDs of tenant appCode are
// already in the table (one primary-key range read), and its arguments.
func countExistingStatement(d Dialect, table, appCode string, eventIDs []string) (string, []interface{}) {
	var sql strings.Builder
	args := make([]interface{}, 0, len(eventIDs)+1)
	args = append(args, appCode)
	sql.WriteString("SELECT COUNT(*) FROM " + table + " WHERE app_code = " + d.placeholder(1) + " AND event_id IN (")
	for i, id := range eventIDs {
		if i > 0 {
			sql.WriteString(", ")
		}
		sql.WriteString(d.placeholder(i + 2))
		args = append(args, id)
	}
	sql.WriteString(")")
	return sql.String(), args
}
