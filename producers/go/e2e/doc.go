// Package e2e holds the Go producer library's end-to-end tests: the library writes rows into
// SQLite, MariaDB and PostgreSQL, the real outboxd host delivers them through the webhook plugin
// to an HTTP server of the test, and every field received is checked against what was written.
//
// Run them with ../test.sh (it installs the Debian driver packages this module resolves
// offline), after the host is built: target/debug/outboxd (or $OUTBOXD_BIN) and
// plugins/out/webhook.wasm.
package e2e
