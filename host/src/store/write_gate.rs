//! The in-process write gate of a single-writer database (SQLite), and the write transaction
//! that holds its pass ([`WriteTx`]).
//!
//! SQLite has one write lock per file. Without a gate, several worker loops (and the pool's
//! connections) of one process race for it with `BEGIN IMMEDIATE`, and each loser waits in
//! SQLite's busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25 … ms between tries: the lock sits
//! idle while the loser sleeps, even when the winner committed long ago. The gate is one FIFO
//! async lock ([`tokio::sync::Mutex`]) taken before `BEGIN IMMEDIATE` and held until the
//! transaction ends, for every write the store makes, so the writers of one process queue in
//! order and pass the lock on the moment it is released. Other processes (producers writing the
//! file) are not in the queue: they and the store still meet in the busy handler
//! (`busy_timeout`).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use sqlx::Database;
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::StoreError;

/// One process's queue for a database's write lock (cloning shares the queue).
#[derive(Debug, Clone)]
pub(crate) struct WriteGate {
    lock: Arc<Mutex<()>>,
    /// Longest wait for the gate before the write fails ([`StoreError::WriteGateTimeout`]).
    timeout: Duration,
}

/// The right to write until dropped (one holder at a time per [`WriteGate`]).
#[derive(Debug)]
pub(crate) struct WritePass {
    _guard: OwnedMutexGuard<()>,
}

impl WriteGate {
    /// A gate whose waiters give up after `timeout` (as SQLite's busy timeout would).
    pub(crate) fn new(timeout: Duration) -> WriteGate {
        WriteGate {
            lock: Arc::new(Mutex::new(())),
            timeout,
        }
    }

    /// Waits for this process's turn to write, in arrival order; `op` names the store operation
    /// in the error when the wait exceeds the gate's timeout.
    pub(crate) async fn enter(&self, op: &'static str) -> Result<WritePass, StoreError> {
        match tokio::time::timeout(self.timeout, self.lock.clone().lock_owned()).await {
            Ok(guard) => Ok(WritePass { _guard: guard }),
            Err(_elapsed) => Err(StoreError::WriteGateTimeout {
                op,
                waited: self.timeout,
            }),
        }
    }
}

/// A write transaction and, for a gated database, the pass that keeps the process's other
/// writers queued until it commits or rolls back (or is dropped).
pub(crate) struct WriteTx<DB: Database> {
    tx: sqlx::Transaction<'static, DB>,
    /// Released after the transaction ends (field order: dropped after `tx`).
    pass: Option<WritePass>,
}

impl<DB: Database> WriteTx<DB> {
    /// `tx`, holding `pass` (if any) until it ends.
    pub(crate) fn new(tx: sqlx::Transaction<'static, DB>, pass: Option<WritePass>) -> WriteTx<DB> {
        WriteTx { tx, pass }
    }

    /// Commits, then lets the next writer in.
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        let WriteTx { tx, pass } = self;
        let result = tx.commit().await;
        hand_on(pass).await;
        result
    }

    /// Rolls back, then lets the next writer in.
    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        let WriteTx { tx, pass } = self;
        let result = tx.rollback().await;
        hand_on(pass).await;
        result
    }
}

/// Releases `pass` and lets the next writer run before the caller goes on: tokio puts the task it
/// wakes in this worker thread's LIFO slot, which no other thread may steal, so without the
/// yield the next writer would wait until the caller's next await (e.g. a whole publish).
async fn hand_on(pass: Option<WritePass>) {
    if let Some(pass) = pass {
        drop(pass);
        tokio::task::yield_now().await;
    }
}

impl<DB: Database> Deref for WriteTx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.tx
    }
}

impl<DB: Database> DerefMut for WriteTx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writers_pass_in_arrival_order_and_a_long_wait_fails() {
        let gate = WriteGate::new(Duration::from_millis(50));
        let first = gate.enter("test").await.unwrap();
        let error = gate.enter("claim").await.unwrap_err();
        assert!(error.to_string().contains("claim"), "{error}");
        assert!(error.is_transient(), "{error}");
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let gate = WriteGate::new(Duration::from_secs(5));
        let held = gate.enter("test").await.unwrap();
        let mut waiters = Vec::new();
        for i in 0..4 {
            let (gate, order) = (gate.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let _pass = gate.enter("test").await.unwrap();
                order.lock().unwrap().push(i);
            }));
            // Each waiter queues before the next is spawned.
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop((first, held));
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    }
}
