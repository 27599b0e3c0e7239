//! Host-side limits of sinks' outbound HTTP (wasi:http), against real loopback servers and the
//! real webhook plugin: the allowlist (refused requests never leave the host and are logged
//! without their query string), the token-bucket rate limit, the first-byte timeout, the
//! response-size cap (announced and streamed), wasi:http refused to sinks without
//! `allow_hosts`, and secrets redacted from what a plugin says.

use crate::{fixtures, http};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fixtures::{captured, engine, logs_of, plugin, retryable_message};
use http::{Reply, WebhookReceiver};
use outboxd::config::{ByteSize, SinkConfig, SinkLimits, SinkSpec};
use outboxd::plugin::{PluginError, PluginSink};
use outboxd::publish::{Event, Outcome, Publisher};
use outboxd::trace_context::TraceContext;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The receiver's signing secret.
const SECRET: &str = "whsec_c2luay1odHRwLXRlc3Qtc2VjcmV0";

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// A webhook sink POSTing to `url`, allowing `allow` hosts.
fn webhook(name: &str, url: &str, allow: &[String]) -> SinkConfig {
    SinkConfig {
        breaker: Default::default(),
        name: name.to_string(),
        plugin: plugin("webhook"),
        config: [("url", url), ("secret", SECRET)]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        limits: SinkLimits {
            allow_hosts: allow.to_vec(),
            ..SinkLimits::default()
        },
    }
}

/// The origin of a loopback address, for `allow_hosts`.
fn origin(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}")
}

fn events(count: usize) -> Vec<Event> {
    (0..count)
        .map(|n| Event {
            app_code: "app".to_string(),
            event_id: format!("evt-{n}"),
            event_type: "RoomMessage".to_string(),
            room_id: format!("room-{}", n % 3),
            room_version: n as i64,
            occurred_at_ms: 1_700_000_000_000 + n as i64,
            body: format!("{{\"n\":{n}}}").into_bytes(),
            attempt: 1,
            trace: None,
        })
        .collect()
}

async fn start(config: &SinkConfig) -> PluginSink {
    PluginSink::start(&engine(), &SinkSpec::new(config.clone()).unwrap())
        .await
        .unwrap_or_else(|e| panic!("sink {} failed to start: {e}", config.name))
}

/// A raw HTTP/1.1 server answering every request `200` with a chunked body of `size` bytes (no
/// `content-length`), counting requests.
async fn chunked_server(size: usize) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let mut response =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    for chunk in vec![b'x'; size].chunks(1000) {
        response.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        response.extend_from_slice(chunk);
        response.extend_from_slice(b"\r\n");
    }
    response.extend_from_slice(b"0\r\n\r\n");
    raw_server(response).await
}

/// A raw HTTP/1.1 server reading each request (head and announced body) and answering it with
/// `response` as given, counting requests.
async fn raw_server(response: Vec<u8>) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let response = Arc::new(response);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            let response = response.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // Read the head and the announced body, then answer.
                loop {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let _ = stream.write_all(&response).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (addr, count)
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// A URL outside the allowlist: the request never leaves the host, the plugin gets a clear
/// error (permanent: only a config change can fix it), and the warning names the sink and the
/// URL without its query string.
#[tokio::test]
async fn requests_outside_the_allowlist_are_refused_and_logged_without_query() {
    captured();
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    let url = format!("{}?token=q-secret-123", receiver.url());
    // Same host, other port: not allowed (exact scheme, host and port).
    let config = webhook("outside", &url, &["http://127.0.0.1:1".to_string()]);
    let sink = start(&config).await;
    let outcomes = sink.publish(&events(2)).await;
    for outcome in &outcomes {
        let Outcome::Permanent { message } = outcome else {
            panic!("a refused request is permanent, got {outcome:?}");
        };
        assert!(
            message.contains("denied") && message.contains("limits.allow_hosts"),
            "{message}"
        );
    }
    assert_eq!(
        receiver.request_count(),
        0,
        "a refused request reached the receiver"
    );
    let logs = logs_of("outside");
    let refusals: Vec<&serde_json::Value> = logs
        .iter()
        .filter(|fields| {
            fields["message"]
                .as_str()
                .is_some_and(|m| m.contains("not in the sink's limits.allow_hosts"))
        })
        .collect();
    assert_eq!(refusals.len(), 2, "{logs:?}");
    assert_eq!(refusals[0]["url"], receiver.url());
    let all = serde_json::to_string(&logs).unwrap();
    assert!(!all.contains("q-secret-123"), "query string logged: {all}");
}

/// A 302 to another origin (allowed too) is not followed by the host: the event is not
/// delivered, and the other origin never sees a request.
#[tokio::test]
async fn a_redirect_to_another_origin_is_not_followed() {
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    let redirect = format!(
        "HTTP/1.1 302 Found\r\nlocation: {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        receiver.url()
    );
    let (redirecting, requests) = raw_server(redirect.into_bytes()).await;
    let config = webhook(
        "redirected",
        &format!("http://{redirecting}/hook"),
        &[origin(redirecting), origin(receiver.addr())],
    );
    let outcomes = start(&config).await.publish(&events(2)).await;
    for outcome in &outcomes {
        assert_ne!(*outcome, Outcome::Delivered, "a 302 counted as delivered");
    }
    assert_eq!(requests.load(Ordering::SeqCst), 2, "one request per event");
    assert_eq!(receiver.request_count(), 0, "the redirect was followed");
}

/// An allowed name that resolves to an internal address (here `localhost` → loopback, as a
/// re-pointed public name would) is refused at the connect: the receiver sees nothing and the
/// warning names the address. `limits.allow_private_addresses = true` lets it through; an
/// allowlisted IP literal always goes (every other test here).
#[tokio::test]
async fn an_allowed_name_resolving_to_an_internal_address_is_refused() {
    captured();
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    let port = receiver.addr().port();
    let url = format!("http://localhost:{port}/hook");
    let allow = [format!("http://localhost:{port}")];
    let refused = start(&webhook("rebound", &url, &allow)).await;
    let outcomes = refused.publish(&events(2)).await;
    for outcome in &outcomes {
        assert_ne!(*outcome, Outcome::Delivered, "{outcome:?}");
    }
    assert_eq!(receiver.request_count(), 0, "the request reached loopback");
    let logs = logs_of("rebound");
    assert!(
        logs.iter().any(|fields| fields["message"]
            .as_str()
            .is_some_and(|m| m.contains("resolves to an internal address"))
            && fields["address"]
                .as_str()
                .is_some_and(|a| a == "127.0.0.1" || a == "::1")),
        "{logs:?}"
    );

    let mut open = webhook("private-ok", &url, &allow);
    open.limits.allow_private_addresses = true;
    let outcomes = start(&open).await.publish(&events(2)).await;
    assert_eq!(outcomes, vec![Outcome::Delivered; 2]);
    assert_eq!(receiver.delivered_ids().len(), 2);
}

/// `max_requests_per_second = 20`: 60 requests of one batch take at least ~2 s (a burst of 20,
/// then 20 per second); every one is delivered (the bucket paces, it never refuses).
#[tokio::test]
async fn the_rate_limit_paces_requests_without_refusing_any() {
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    let mut config = webhook("paced", &receiver.url(), &[origin(receiver.addr())]);
    config.limits.max_requests_per_second = 20;
    config.config.insert("timeout_ms".into(), "8000".into());
    let sink = start(&config).await;
    let started = Instant::now();
    let outcomes = sink.publish(&events(60)).await;
    let elapsed = started.elapsed();
    assert!(
        outcomes.iter().all(|o| *o == Outcome::Delivered),
        "{outcomes:?}"
    );
    assert_eq!(receiver.delivered_ids().len(), 60);
    assert!(
        elapsed >= Duration::from_millis(1500),
        "took only {elapsed:?}"
    );
}

/// A raw HTTP/1.1 server answering every request `200` after `delay`, recording the most
/// requests it ever had open at once (a request counts from its accept until its answer starts).
async fn concurrency_server(delay: Duration) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let open = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let seen = most.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let now = open.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let open = open.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                // The server's configured delay before it answers (part of the test).
                tokio::time::sleep(delay).await;
                open.fetch_sub(1, Ordering::SeqCst);
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (addr, seen)
}

/// `max_concurrent_requests = 3`: a batch of 24 events (the webhook plugin sends them all at
/// once) never has more than 3 requests open at the receiver, and every event is delivered;
/// the default (16) lets more through at once.
#[tokio::test]
async fn concurrent_requests_are_capped_per_sink() {
    let (addr, most) = concurrency_server(Duration::from_millis(50)).await;
    let url = format!("http://{addr}/hook");
    let mut config = webhook("capped", &url, &[origin(addr)]);
    config.limits.max_concurrent_requests = 3;
    let sink = start(&config).await;
    let outcomes = sink.publish(&events(24)).await;
    assert!(
        outcomes.iter().all(|o| *o == Outcome::Delivered),
        "{outcomes:?}"
    );
    assert_eq!(most.load(Ordering::SeqCst), 3);

    let (addr, most) = concurrency_server(Duration::from_millis(50)).await;
    let url = format!("http://{addr}/hook");
    let sink = start(&webhook("default-cap", &url, &[origin(addr)])).await;
    let outcomes = sink.publish(&events(24)).await;
    assert!(
        outcomes.iter().all(|o| *o == Outcome::Delivered),
        "{outcomes:?}"
    );
    let seen = most.load(Ordering::SeqCst);
    assert!((4..=16).contains(&seen), "{seen} at once");
}

/// A server that stalls past the sink's `first_byte_timeout` fails the request quickly, even
/// though the plugin itself would wait 10 s.
#[tokio::test]
async fn a_stalling_server_hits_the_first_byte_timeout() {
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    receiver.script(1, Reply::Stall(Duration::from_secs(4)));
    let mut config = webhook("stalled", &receiver.url(), &[origin(receiver.addr())]);
    config.limits.first_byte_timeout = Duration::from_millis(300);
    let sink = start(&config).await;
    let started = Instant::now();
    let outcomes = sink.publish(&events(1)).await;
    let elapsed = started.elapsed();
    let message = retryable_message(&outcomes[0]);
    assert!(message.contains("timed out"), "{message}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    assert_eq!(receiver.delivered_ids().len(), 0);
}

/// A response body over `max_response_size` fails for the plugin with a clear error, whether
/// its size is announced (`content-length`) or only seen while streaming (chunked).
#[tokio::test]
async fn responses_over_the_size_cap_fail() {
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    receiver.script(
        1,
        Reply::Status {
            status: 200,
            retry_after: None,
            body: "x".repeat(10_000),
        },
    );
    let mut config = webhook("capped", &receiver.url(), &[origin(receiver.addr())]);
    config.limits.max_response_size = ByteSize(4096);
    let sink = start(&config).await;
    let outcomes = sink.publish(&events(1)).await;
    let message = retryable_message(&outcomes[0]);
    assert!(message.contains("limits.max_response_size"), "{message}");
    // A small answer still goes through.
    assert_eq!(sink.publish(&events(1)).await, vec![Outcome::Delivered]);

    // Streamed: the body fails once more than the cap has arrived.
    let (addr, requests) = chunked_server(20_000).await;
    let mut config = webhook("capped-stream", &format!("http://{addr}/"), &[origin(addr)]);
    config.limits.max_response_size = ByteSize(4096);
    let sink = start(&config).await;
    let outcomes = sink.publish(&events(1)).await;
    let message = retryable_message(&outcomes[0]);
    assert!(
        message.contains("response body size exceeds limit"),
        "{message}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 1);

    // The same streamed answer under the cap is read whole: delivered.
    let mut config = webhook(
        "uncapped-stream",
        &format!("http://{addr}/"),
        &[origin(addr)],
    );
    config.limits.max_response_size = ByteSize(64 * 1024);
    let sink = start(&config).await;
    assert_eq!(sink.publish(&events(1)).await, vec![Outcome::Delivered]);
}

/// A plugin importing wasi:http is refused at start when its sink allows no host, with one
/// error naming the sink and the setting; bad allowlist entries are refused too.
#[tokio::test]
async fn wasi_http_plugins_need_allow_hosts() {
    let config = webhook("no-hosts", "http://127.0.0.1:9/hook", &[]);
    let error = PluginSink::start(&engine(), &SinkSpec::new(config.clone()).unwrap())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(error, PluginError::HttpNotAllowed { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with("sink `no-hosts`: plugin ") && text.contains("set `limits.allow_hosts`"),
        "{text}"
    );

    let config = webhook(
        "bad-entry",
        "http://127.0.0.1:9/hook",
        &["127.0.0.1:9".to_string()],
    );
    // An entry that is no origin never gets as far as the plugin: the sink's spec refuses it.
    let error = SinkSpec::new(config.clone()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid config key `sink.limits.allow_hosts`: entry `127.0.0.1:9` must look like https://host[:port]"
    );

    // A plugin without wasi:http still starts without allow_hosts.
    let log = SinkConfig {
        breaker: Default::default(),
        name: "plain".into(),
        plugin: plugin("log"),
        config: Default::default(),
        limits: SinkLimits::default(),
    };
    start(&log).await;
}

/// Secret config values never surface in what the host reports: here a plugin's `init` error
/// quoting a secret-looking setting.
#[tokio::test]
async fn secrets_are_redacted_from_plugin_messages() {
    let config = SinkConfig {
        breaker: Default::default(),
        name: "leaky".into(),
        plugin: plugin("chaos"),
        config: [
            ("api_token".to_string(), "tok-very-secret-42".to_string()),
            // chaos's init fails with this text, quoting the secret.
            (
                "init_error".to_string(),
                "api_token = tok-very-secret-42".to_string(),
            ),
        ]
        .into_iter()
        .collect(),
        limits: SinkLimits::default(),
    };
    let error = PluginSink::start(&engine(), &SinkSpec::new(config.clone()).unwrap())
        .await
        .err()
        .unwrap();
    let text = error.to_string();
    assert!(!text.contains("tok-very-secret-42"), "{text}");
    assert!(text.contains("api_token = ***"), "{text}");
}

/// The Rust and the JavaScript webhook plugins send each event's trace context (the WIT `trace`
/// import) as the `traceparent` and `tracestate` headers: with a state, without one, and no
/// header at all for an event that carries none, in one batch through the real host.
#[tokio::test]
async fn webhooks_send_each_events_trace_context() {
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    for plugin_name in ["webhook", "webhook-js"] {
        let receiver = WebhookReceiver::start(&[SECRET]).await;
        let mut config = webhook(plugin_name, &receiver.url(), &[origin(receiver.addr())]);
        config.plugin = plugin(plugin_name);
        let sink = start(&config).await;
        let mut batch = events(3);
        batch[0].trace = Some(TraceContext::new(PARENT, "rojo=00f067aa0ba902b7").unwrap());
        batch[1].trace = Some(TraceContext::new(OTHER, "").unwrap());
        assert_eq!(
            sink.publish(&batch).await,
            vec![Outcome::Delivered; 3],
            "{plugin_name}"
        );
        let mut seen: Vec<_> = receiver
            .deliveries()
            .into_iter()
            .map(|d| (d.id, d.traceparent, d.tracestate))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                (
                    "evt-0".to_string(),
                    Some(PARENT.to_string()),
                    Some("rojo=00f067aa0ba902b7".to_string())
                ),
                ("evt-1".to_string(), Some(OTHER.to_string()), None),
                ("evt-2".to_string(), None, None),
            ],
            "{plugin_name}"
        );
    }
}
