package outbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync"
)

// fakeDB is an in-memory stand-in for a database/sql driver that understands the two statements
// the producer sends: it keeps the set of (app_code, event_id) keys, answers COUNT queries from
// it and reports an INSERT's affected rows as MySQL does, with or without CLIENT_FOUND_ROWS.
type fakeDB struct {
	mu         sync.Mutex
	foundRows  bool                  // count a duplicate key as an affected row
	keys       map[[2]string][]byte  // stored envelopes by key
	statements []string              // every statement run, in order
	insertErr  error                 // returned by the next INSERT when set
	inserts    [][]driver.NamedValue // the arguments of every INSERT
}

// The fake as a database/sql driver named "outbox-fake", for the examples: they open it with
// sql.Open as a program opens its real driver. Each data source name is one fake table.
func init() { sql.Register("outbox-fake", fakeDriver{}) }

type fakeDriver struct{}

var fakeTables = struct {
	sync.Mutex
	byName map[string]*fakeDB
}{byName: map[string]*fakeDB{}}

// Open returns a connection to the fake table named name, made empty on first use.
func (fakeDriver) Open(name string) (driver.Conn, error) {
	fakeTables.Lock()
	defer fakeTables.Unlock()
	f := fakeTables.byName[name]
	if f == nil {
		f = &fakeDB{keys: map[[2]string][]byte{}}
		fakeTables.byName[name] = f
	}
	return fakeConn{f}, nil
}

// open returns a *sql.DB over the fake.
func (f *fakeDB) open() *sql.DB {
	if f.keys == nil {
		f.keys = map[[2]string][]byte{}
	}
	return sql.OpenDB(fakeConnector{f})
}

type fakeConnector struct{ db *fakeDB }

func (c fakeConnector) Connect(context.Context) (driver.Conn, error) { return fakeConn{c.db}, nil }
func (c fakeConnector) Driver() driver.Driver                        { return nil }

type fakeConn struct{ db *fakeDB }

func (c fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no Prepare") }
func (c fakeConn) Close() error                        { return nil }
func (c fakeConn) Begin() (driver.Tx, error)           { return fakeTx{}, nil }

type fakeTx struct{}

func (fakeTx) Commit() error   { return nil }
func (fakeTx) Rollback() error { return nil }

// ExecContext runs an INSERT of 7-value row tuples.
func (c fakeConn) ExecContext(_ context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	f := c.db
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statements = append(f.statements, query)
	if !strings.HasPrefix(query, "INSERT INTO ") || len(args)%placeholdersPerRow != 0 {
		return nil, errors.New("fake: unexpected statement " + query)
	}
	if err := f.insertErr; err != nil {
		f.insertErr = nil
		return nil, err
	}
	f.inserts = append(f.inserts, args)
	var affected int64
	for i := 0; i < len(args); i += placeholdersPerRow {
		key := [2]string{args[i].Value.(string), args[i+1].Value.(string)}
		if _, dup := f.keys[key]; dup {
			if f.foundRows {
				affected++
			}
			continue
		}
		f.keys[key] = args[i+4].Value.([]byte)
		affected++
	}
	return driver.RowsAffected(affected), nil
}

// QueryContext answers `SELECT COUNT(*) … WHERE app_code = ? AND event_id IN (…)`.
func (c fakeConn) QueryContext(_ context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	f := c.db
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statements = append(f.statements, query)
	if !strings.HasPrefix(query, "SELECT COUNT(*) FROM ") {
		return nil, errors.New("fake: unexpected query " + query)
	}
	var n int64
	for _, id := range args[1:] {
		if _, ok := f.keys[[2]string{args[0].Value.(string), id.Value.(string)}]; ok {
			n++
		}
	}
	return &countRows{n: n}, nil
}

// countRows is a one-row, one-column result.
type countRows struct {
	n    int64
	done bool
}

func (r *countRows) Columns() []string { return []string{"count"} }
func (r *countRows) Close() error      { return nil }
func (r *countRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0] = r.n
	return nil
}

// counts returns how many statements of each kind ran.
func (f *fakeDB) counts() (selects, inserts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.statements {
		if strings.HasPrefix(s, "SELECT") {
			selects++
		} else {
			inserts++
		}
	}
	return selects, inserts
}
