//! The store's connections across a database restart, on a private MariaDB and PostgreSQL: a
//! pooled connection is handed out without a ping while it is in use (one round trip less
//! before each read and mark of a busy host), so this proves that connections left idle across
//! a restart are still checked and replaced, and that the first statements after it succeed.
//! Starting and restarting a private server leaves the machine's temporary tables alone: a
//! `mariadbd` deletes every `#sql*` file of its tmpdir when it starts, and in `/tmp` those are the
//! shared MariaDB's, open in its running queries (it crashed dropping one, failing CI runs).

use std::time::Duration;

use outboxd::store::ConnectOptions;

use crate::support;
use support::private_server::{Kind, PrivateServer};

/// Two pooled connections, both used, the server restarted under them, then the store used
/// again: every call must succeed on the first try (each dead connection is pinged at checkout,
/// dropped, and a new one opened).
async fn idle_connections_are_replaced_after_a_restart(kind: Kind) {
    // Named as the shared server names its temporary tables in the machine's tmpdir.
    let canary = Canary::new();
    let Some(mut server) = PrivateServer::start(kind).await else {
        return;
    };
    let store = outboxd::store::connect(&ConnectOptions {
        max_connections: 2,
        ..ConnectOptions::new(server.url())
    })
    .await
    .expect("connect to the private server");
    store.migrate().await.expect("migrate");
    // Both connections of the pool open and back in it.
    let (a, b) = tokio::join!(store.clock_ms(), store.clock_ms());
    a.expect("clock on connection 1");
    b.expect("clock on connection 2");

    server.stop();
    server.spawn();
    server.wait_ready().await;
    // The restart took longer than the idle time after which a connection is pinged, but make
    // sure of it: this test is about idle connections.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    for round in 0..4 {
        let (a, b) = tokio::join!(store.clock_ms(), store.clock_ms());
        a.unwrap_or_else(|e| panic!("round {round}, call 1 after the restart: {e}"));
        b.unwrap_or_else(|e| panic!("round {round}, call 2 after the restart: {e}"));
    }
    store.close().await;
    assert!(
        canary.0.exists(),
        "the private {kind:?} server deleted {} (a temporary table of the machine's tmpdir) \
         when it started",
        canary.0.display()
    );
}

/// A file named as MariaDB names an internal temporary table, in the machine's tmpdir (the one a
/// server started without `--tmpdir` uses); removed when dropped.
struct Canary(std::path::PathBuf);

impl Canary {
    fn new() -> Canary {
        let name = format!("#sql-temptable-outboxd-canary-{}", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, b"").expect("write the canary");
        Canary(path)
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_idle_connections_are_replaced_after_a_restart() {
    idle_connections_are_replaced_after_a_restart(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_idle_connections_are_replaced_after_a_restart() {
    idle_connections_are_replaced_after_a_restart(Kind::MariaDb).await;
}
