//! A host under test: `outboxd run`'s service over a test database with the console on a free
//! port, the log plugin taking `Room*` events, and rows made beforehand (dead letters, an event
//! type that is markup).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use outboxd::config::Config;
use outboxd::record::now_ms;
use outboxd::service::Service;
use outboxd::store::{ClaimBatch, Disposition, Mark, MarkParams, OutboxStore};
use outboxd::trace_context::TraceContext;
use outboxd::worker::RunMode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::fixtures;
use crate::support::{Backend, HandHost, TestDb, typed_record};

/// The action token of the host.
pub const TOKEN: &str = "console-test-token-0123456789";
/// How long a scenario waits for a condition.
pub const DEADLINE: Duration = Duration::from_secs(40);
/// The event type that is markup.
pub const XSS_TYPE: &str = "<script>window.__xss=1</script>";
/// The room of the event of type [`XSS_TYPE`]: markup too.
pub const XSS_ROOM: &str = "room-<i>2</i>";
/// The `failed` rows of the table once [`Host::start`] returns: the 6 dead letters and the event
/// of type [`XSS_TYPE`].
pub const FAILED_ROWS: u64 = 7;

/// A running host.
pub struct Host {
    pub db: TestDb,
    pub store: Arc<dyn OutboxStore>,
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

fn config(dir: &Path) -> Config {
    let path = dir.join("outboxd.toml");
    let text = format!(
        r#"
[worker]
app_codes = ["default"]
poll_interval = "50ms"

[admin]
listen = "127.0.0.1:0"
refresh_interval = "200ms"
token = "{TOKEN}"

[plugins]
cache_dir = "{cache}"

[telemetry]
trace_url = "http://jaeger.example:16686/trace/{{trace_id}}"
# Tracing on (nothing listens there: spans are dropped), so the console names outboxd's own trace
# of an untraced event.
endpoint = "http://127.0.0.1:9"
timeout = "200ms"

[[route]]
event_type = "Room*"
sink = "log"

[[sink]]
name = "log"
plugin = "{plugin}"
config = {{ format = "json" }}
"#,
        cache = dir.join("cache").display(),
        plugin = fixtures::plugin("log").display(),
    );
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path), std::iter::empty()).expect("config loads")
}

/// The producer's trace context of the dead letter `dead-0`.
pub const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

impl Host {
    /// A host over a fresh database holding 6 dead letters (`dead-0`..`dead-5`, RoomGiftSent
    /// and RoomMicChanged, two errors; `dead-0` carries the trace context [`TRACEPARENT`]) and one event of type [`XSS_TYPE`], failed by the host
    /// (no route) once it runs.
    pub async fn start(backend: Backend) -> Option<Host> {
        let db = TestDb::new(backend).await?;
        let store = db.store_default().await;
        let now = now_ms();
        let records: Vec<_> = (0..6)
            .map(|i| {
                let event_type = if i % 2 == 0 {
                    "RoomGiftSent"
                } else {
                    "RoomMicChanged"
                };
                let record = typed_record(
                    "default",
                    &format!("dead-{i}"),
                    "room-1",
                    event_type,
                    now - 60_000 + i,
                );
                match i {
                    // The producer's trace context, shown on the event's page.
                    0 => record.with_trace_context(&TraceContext::new(TRACEPARENT, "").unwrap()),
                    _ => record,
                }
            })
            .collect();
        store.enqueue(&records).await.unwrap();
        let batch = read_room(&store, now).await;
        assert_eq!(batch.events.len(), 6, "the dead letters' room");
        let marks: Vec<Mark> = batch
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| Mark {
                event_id: e.event.event_id.clone(),
                disposition: Disposition::Failed {
                    error: if i < 4 {
                        "HTTP 503 from the receiver".into()
                    } else {
                        "<b>bold</b> refusal".into()
                    },
                },
            })
            .collect();
        store
            .mark(&MarkParams {
                lease: &batch.lease,
                marks: &marks,
                now_ms: now,
            })
            .await
            .unwrap();
        // `before` leaves: its partitions go to the host under test at its first heartbeat.
        BEFORE
            .heartbeat_or_leave(&*store, true)
            .await
            .expect("before leaves");
        store
            .enqueue(&[typed_record("default", "xss-1", XSS_ROOM, XSS_TYPE, now)])
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let service = Service::bind(config(dir.path()), store.clone())
            .await
            .expect("binds");
        let addr = service.admin_addr().expect("admin listener");
        let shutdown = CancellationToken::new();
        let run = service.run(RunMode::Forever, shutdown.clone());
        let task = tokio::spawn(async move {
            run.await.expect("the service runs");
        });
        let host = Host {
            db,
            store,
            addr,
            shutdown,
            task,
            _dir: dir,
        };
        host.wait_status("xss-1", "failed").await;
        Some(host)
    }

    /// Waits until row `id` has `status`.
    pub async fn wait_status(&self, id: &str, status: &str) {
        crate::support::wait_until(&format!("{id} {status}"), DEADLINE, || async {
            match self.db.row("default", id).await {
                Some(row) if row.status == status => Ok(()),
                other => Err(other.map(|r| (r.status, r.retry_count, r.last_error))),
            }
        })
        .await;
    }

    /// Stops the host and drops its database.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
        self.db.cleanup().await;
    }
}

/// Host `before` of tenant `default`, which makes the dead letters (it leaves before the host
/// starts).
const BEFORE: HandHost<'static> = HandHost {
    app: "default",
    id: "before",
    lease_ms: 60_000,
};

/// For rows that all live in one room: [`BEFORE`] takes every partition of `default` and reads
/// each; the one batch that handed out rows (panics when none did).
async fn read_room(store: &Arc<dyn OutboxStore>, now: i64) -> ClaimBatch {
    for fence in BEFORE.heartbeat(&**store).await.owned {
        let batch = store
            .read_partitions(&BEFORE.read(vec![fence], 10, now, false))
            .await
            .unwrap_or_else(|e| panic!("read of partition {fence:?}: {e}"));
        if !batch.events.is_empty() {
            return batch;
        }
    }
    panic!("no partition of {} held rows", BEFORE.id);
}

/// One HTTP/1.1 answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One request to the host; `headers` as `Name: value` lines, `form` urlencoded.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[String],
    form: &str,
) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    if method == "POST" {
        head.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            form.len()
        ));
    }
    head.push_str("\r\n");
    head.push_str(form);
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}
