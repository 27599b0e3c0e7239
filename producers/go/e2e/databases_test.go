package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // driver "mysql"
	_ "github.com/lib/pq"              // driver "postgres"
	_ "github.com/mattn/go-sqlite3"    // driver "sqlite3"

	outbox "github.com/outboxd/outboxd/producers/go"
)

// testDB is one fresh database of one test.
type testDB struct {
	dialect outbox.Dialect
	// hostURL is the database's URL for the host's config.
	hostURL string
	// db is the library's connection; MySQL's reports found rows (CLIENT_FOUND_ROWS), the case
	// where a naive inserted count goes wrong.
	db *sql.DB
	// others are more connections to check duplicate counts on (MySQL: without found rows).
	others []*sql.DB
	// businessTable is the DDL of the test's own business table.
	businessTable string
	// sqlitePath is the SQLite file, opened (db) once the host's migrate made it.
	sqlitePath string
}

// freshName returns a database name no other test uses.
func freshName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "outboxd_go_" + hex.EncodeToString(b[:])
}

// open opens and pings a connection, or reports the server unavailable.
func open(t *testing.T, driver, dsn, what string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", what, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		unavailable(t, "%s does not answer: %v", what, err)
	}
	return db
}

// mustExec runs a statement or fails the test.
func mustExec(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// sqliteDB is a temp SQLite file.
func sqliteDB(t *testing.T) *testDB {
	path := filepath.Join(t.TempDir(), "outboxd.db")
	return &testDB{
		dialect:       outbox.SQLite,
		hostURL:       "sqlite://" + path + "?mode=rwc",
		sqlitePath:    path,
		businessTable: "CREATE TABLE gift_order (id VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)",
	}
}

// mariaDB creates a database on the MariaDB at 127.0.0.1:3306 (root, no password) and drops it
// when the test ends.
func mariaDB(t *testing.T) *testDB {
	admin := open(t, "mysql", "root@tcp(127.0.0.1:3306)/?timeout=3s", "MariaDB at 127.0.0.1:3306")
	name := freshName()
	mustExec(t, admin, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	t.Cleanup(func() {
		mustExec(t, admin, "DROP DATABASE IF EXISTS "+name)
		_ = admin.Close()
	})
	dsn := "root@tcp(127.0.0.1:3306)/" + name + "?timeout=3s&charset=utf8mb4"
	db := open(t, "mysql", dsn+"&clientFoundRows=true", "MariaDB database "+name)
	plain := open(t, "mysql", dsn, "MariaDB database "+name)
	t.Cleanup(func() { _ = db.Close(); _ = plain.Close() })
	return &testDB{
		dialect:       outbox.MySQL,
		hostURL:       "mysql://root@127.0.0.1:3306/" + name,
		db:            db,
		others:        []*sql.DB{plain},
		businessTable: "CREATE TABLE gift_order (id VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL) ENGINE=InnoDB",
	}
}

// postgresDB creates a database on the PostgreSQL at 127.0.0.1:5432 (user postgres, trust) and
// drops it when the test ends.
func postgresDB(t *testing.T) *testDB {
	const base = "postgres://postgres@127.0.0.1:5432/"
	admin := open(t, "postgres", base+"postgres?sslmode=disable&connect_timeout=3", "PostgreSQL at 127.0.0.1:5432")
	name := freshName()
	mustExec(t, admin, "CREATE DATABASE "+name)
	db := open(t, "postgres", base+name+"?sslmode=disable&connect_timeout=3", "PostgreSQL database "+name)
	t.Cleanup(func() {
		_ = db.Close()
		if _, err := admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			mustExec(t, admin, "DROP DATABASE IF EXISTS "+name) // before PostgreSQL 13
		}
		_ = admin.Close()
	})
	return &testDB{
		dialect:       outbox.Postgres,
		hostURL:       base + name,
		db:            db,
		businessTable: "CREATE TABLE gift_order (id VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)",
	}
}

// connect opens the library's connection where it is made after the migration (SQLite: the
// host creates the file) and creates the business table.
func (d *testDB) connect(t *testing.T) {
	t.Helper()
	if d.sqlitePath != "" {
		d.db = open(t, "sqlite3", "file:"+d.sqlitePath+"?_busy_timeout=10000", "SQLite file "+d.sqlitePath)
		d.db.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = d.db.Close() })
	}
	mustExec(t, d.db, d.businessTable)
}

// String names the database kind in messages.
func (d *testDB) String() string { return fmt.Sprint(d.dialect) }
