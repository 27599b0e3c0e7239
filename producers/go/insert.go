package outbox

import (
	"context"
	"database/sql"
	"fmt"
)

// insertChunk inserts rows (distinct keys, at most rowsPerInsert) with one INSERT and returns how
// many were new.
func (p *Producer) insertChunk(ctx context.Context, tx *sql.Tx, rows []row) (int, error) {
	existing := 0
	if p.dialect.insertCountsDuplicates() {
		var err error
		if existing, err = p.countExisting(ctx, tx, rows); err != nil {
			return 0, err
		}
	}
	query, args := insertStatement(p.dialect, p.table, rows)
	result, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("outbox: insert %d row(s) into %s (first event id %q): %w", len(rows), p.table, rows[0].eventID, err)
	}
	affected, err := result.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("outbox: insert into %s: rows affected: %w", p.table, err)
	}
	if !p.dialect.insertCountsDuplicates() {
		return int(affected), nil
	}
	// MySQL counts a new row as 1 and a duplicate as 0, or as 1 with CLIENT_FOUND_ROWS; the
	// rows already there were counted before the INSERT, so the new rows are at most the rest.
	if fresh := len(rows) - existing; int(affected) > fresh {
		return fresh, nil
	}
	return int(affected), nil
}

// countExisting returns how many of rows' keys are already in the table: a plain (non-locking)
// read per tenant, so concurrent producers do not deadlock on the index gap their new ids share.
func (p *Producer) countExisting(ctx context.Context, tx *sql.Tx, rows []row) (int, error) {
	var tenants []string
	ids := make(map[string][]string)
	for _, r := range rows {
		if _, ok := ids[r.appCode]; !ok {
			tenants = append(tenants, r.appCode)
		}
		ids[r.appCode] = append(ids[r.appCode], r.eventID)
	}
	total := 0
	for _, appCode := range tenants {
		query, args := countExistingStatement(p.dialect, p.table, appCode, ids[appCode])
		var n int
		if err := tx.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("outbox: count existing ids in %s: %w", p.table, err)
		}
		total += n
	}
	return total, nil
}
