package outbox

import (
	"fmt"
	"strconv"
)

// Dialect is the SQL flavour of the database holding the outbox table.
type Dialect int

const (
	// MySQL is MySQL ≥ 8.0 or MariaDB ≥ 10.6 (e.g. github.com/go-sql-driver/mysql): `?`
	// placeholders, ON DUPLICATE KEY UPDATE; inserted counts are right with or without the
	// driver's clientFoundRows.
	MySQL Dialect = iota + 1
	// Postgres is PostgreSQL (e.g. github.com/lib/pq, github.com/jackc/pgx/v5/stdlib): `$n`
	// placeholders, ON CONFLICT DO NOTHING.
	Postgres
	// SQLite is SQLite ≥ 3.24 (e.g. github.com/mattn/go-sqlite3, modernc.org/sqlite): `?`
	// placeholders, ON CONFLICT DO NOTHING.
	SQLite
)

// String returns the dialect's name: "mysql", "postgres" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "mysql"
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// valid reports an error unless d is one of the declared dialects.
func (d Dialect) valid() error {
	switch d {
	case MySQL, Postgres, SQLite:
		return nil
	}
	return fmt.Errorf("outbox: unknown dialect %v: use outbox.MySQL, outbox.Postgres or outbox.SQLite", d)
}

// placeholder returns the n-th (1-based) bind placeholder.
func (d Dialect) placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// ignoreDuplicateKey is the clause that makes an INSERT keep rows already present. MySQL's is
// not INSERT IGNORE, which would swallow other errors (truncation, bad values) as well.
func (d Dialect) ignoreDuplicateKey() string {
	if d == MySQL {
		return " ON DUPLICATE KEY UPDATE event_id = event_id"
	}
	return " ON CONFLICT (app_code, event_id) DO NOTHING"
}

// insertCountsDuplicates reports whether the INSERT's affected-row count may include rows that
// were already present: MySQL with CLIENT_FOUND_ROWS (the go-sql-driver's clientFoundRows=true,
// mysql2's default) counts a duplicate key as one row found.
func (d Dialect) insertCountsDuplicates() bool {
	return d == MySQL
}

// rowsPerInsert is the most rows one INSERT carries: 7 placeholders per row stay under every
// driver's limit (SQLite before 3.32: 999; MySQL and PostgreSQL: 65535).
func (d Dialect) rowsPerInsert() int {
	if d == SQLite {
		return 999 / placeholdersPerRow
	}
	return 500
}
