//! The operator console over a running host (a real worker, the real log plugin, a real database:
//! SQLite, MariaDB and PostgreSQL): `api.rs` drives the JSON and the forms over plain HTTP, access
//! and escaping included; `browser.rs` drives the pages in a real Chromium over WebDriver and
//! saves screenshots under `target/console-screenshots/`. `host.rs` starts the host.

mod api;
mod browser;
mod host;
