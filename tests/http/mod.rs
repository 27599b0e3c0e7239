//! Real HTTP servers on loopback for the sink tests: a Standard Webhooks receiver and a fake
//! Tencent Cloud IM REST endpoint.
//!
//! Both check what the plugins send with their OWN implementation (HMAC-SHA256 from the `hmac`
//! and `sha2` crates, base64, zlib from `miniz_oxide`), never the plugins' code, so a bug in a
//! plugin's signing shows up as a refused request. Both listen on `127.0.0.1:0`, record every
//! request, and can be scripted to answer the next requests with failures or to stall. A server
//! stops when its handle drops.
//!
//! ```ignore
//! mod http;
//! use http::{FakeIm, Reply, WebhookReceiver};
//!
//! let receiver = WebhookReceiver::start(&["whsec_c2VjcmV0"]).await;
//! receiver.script(2, Reply::status(503).retry_after("1"));   // the next 2 valid requests get 503
//! // … configure a webhook sink with url = receiver.url() and run outboxd …
//! assert_eq!(receiver.delivered_count("evt-1"), 1);
//!
//! let im = FakeIm::start(1400000000, "admin", "secret-key").await;
//! im.fail_next(1, 10002);                                     // one internal-error answer
//! // … configure an im sink with endpoint = im.endpoint() …
//! assert_eq!(im.messages("room_r1").len(), 1);
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::http::request::Parts;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

mod otlp;
#[allow(unused_imports)] // the tracing tests use it, the other files do not
pub use otlp::{ExportedSpan, OtlpCollector};

/// How far a `webhook-timestamp` may be from the receiver's clock (Standard Webhooks' default).
pub const TIMESTAMP_TOLERANCE_SECS: u64 = 300;

/// A scripted answer for one upcoming request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Answer with this status, an optional `Retry-After` value and a body.
    Status {
        /// The HTTP status.
        status: u16,
        /// `Retry-After` header value, if any.
        retry_after: Option<String>,
        /// Response body.
        body: String,
    },
    /// Hold the request this long, then answer 503 (so a stalled request never counts as
    /// delivered, whether or not the client waited).
    Stall(Duration),
}

impl Reply {
    /// A `status` answer with no `Retry-After` and body `scripted <status>`.
    pub fn status(status: u16) -> Reply {
        Reply::Status {
            status,
            retry_after: None,
            body: format!("scripted {status}"),
        }
    }

    /// This reply with a `Retry-After: value` header (no effect on a stall).
    pub fn retry_after(self, value: &str) -> Reply {
        match self {
            Reply::Status { status, body, .. } => Reply::Status {
                status,
                retry_after: Some(value.to_string()),
                body,
            },
            stall => stall,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared server plumbing
// ---------------------------------------------------------------------------------------------

/// A running loopback server; aborts its accept loop when dropped.
struct Server {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves HTTP/1 on `127.0.0.1:0`, handing each request (head and whole body) to `handler`.
async fn serve<H, F>(handler: H) -> Server
where
    H: Fn(Parts, Bytes) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("listener address");
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let handler = handler.clone();
                    async move {
                        let (parts, body) = request.into_parts();
                        let bytes = body
                            .collect()
                            .await
                            .map(|body| body.to_bytes())
                            .unwrap_or_default();
                        Ok::<_, Infallible>(handler(parts, bytes).await)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Server { addr, task }
}

/// A response with `status`, extra `headers` and `body`.
fn respond(
    status: u16,
    headers: &[(&str, &str)],
    content_type: &str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", content_type);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

/// Seconds since the Unix epoch.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// A header's value as text, if present and valid.
fn header(parts: &Parts, name: &str) -> Option<String> {
    parts
        .headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string)
}

/// HMAC-SHA256 of `message` under `key`, ready to finish or verify.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message);
    mac
}

// ---------------------------------------------------------------------------------------------
// Webhook receiver
// ---------------------------------------------------------------------------------------------

/// One request that passed signature verification.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// `webhook-id`.
    pub id: String,
    /// `webhook-timestamp`.
    pub timestamp: u64,
    /// `content-type` of the request.
    pub content_type: Option<String>,
    /// The request body.
    pub body: Vec<u8>,
    /// The status the receiver answered with (2xx means delivered).
    pub status: u16,
    /// `traceparent` (W3C Trace Context), when sent.
    pub traceparent: Option<String>,
    /// `tracestate`, when sent.
    pub tracestate: Option<String>,
}

/// What the receiver has seen.
#[derive(Default)]
struct ReceiverState {
    script: VecDeque<Reply>,
    deliveries: Vec<Delivery>,
    rejected: Vec<String>,
    requests: usize,
    /// The `webhook-id` whose requests are held unanswered ([`WebhookReceiver::hold`]).
    hold: Option<String>,
    /// How many requests were held.
    held: usize,
}

/// A Standard Webhooks receiver on loopback: verifies every `webhook-signature` against its
/// secrets (and the timestamp against its clock, ±[`TIMESTAMP_TOLERANCE_SECS`]), answers 401 to a
/// bad or missing signature, records the verified requests by `webhook-id`, and otherwise answers
/// `204`, or the next scripted [`Reply`].
pub struct WebhookReceiver {
    server: Server,
    state: Arc<Mutex<ReceiverState>>,
}

impl WebhookReceiver {
    /// Starts a receiver that accepts signatures by any of `secrets` (each `whsec_<base64>`).
    pub async fn start(secrets: &[&str]) -> WebhookReceiver {
        let keys: Arc<Vec<Vec<u8>>> = Arc::new(
            secrets
                .iter()
                .map(|secret| {
                    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
                    STANDARD
                        .decode(encoded)
                        .expect("test secret is whsec_<base64>")
                })
                .collect(),
        );
        let state = Arc::new(Mutex::new(ReceiverState::default()));
        let shared = state.clone();
        let server = serve(move |parts, body| {
            let (keys, state) = (keys.clone(), shared.clone());
            async move { receive(&keys, &state, parts, body).await }
        })
        .await;
        WebhookReceiver { server, state }
    }

    /// The URL to configure as the sink's `url` (`http://127.0.0.1:<port>/hook`).
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.server.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// Answers the next `n` verified requests with `reply` (after any already scripted).
    pub fn script(&self, n: usize, reply: Reply) {
        let mut state = self.state.lock().unwrap();
        state.script.extend(std::iter::repeat_n(reply, n));
    }

    /// Holds every verified request carrying `webhook-id` `id` without ever answering it (a
    /// downstream that hangs on that one event); they are counted ([`WebhookReceiver::held`]),
    /// not recorded as deliveries.
    pub fn hold(&self, id: &str) {
        self.state.lock().unwrap().hold = Some(id.to_string());
    }

    /// How many requests [`WebhookReceiver::hold`] has held.
    pub fn held(&self) -> usize {
        self.state.lock().unwrap().held
    }

    /// Every verified request, in arrival order (whatever the receiver answered).
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state.lock().unwrap().deliveries.clone()
    }

    /// How many verified requests carried `webhook-id` `id` (attempts, failed ones included).
    pub fn attempts(&self, id: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .deliveries
            .iter()
            .filter(|d| d.id == id)
            .count()
    }

    /// How many times `id` was answered with a 2xx, i.e. delivered.
    pub fn delivered_count(&self, id: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .deliveries
            .iter()
            .filter(|d| d.id == id && (200..300).contains(&d.status))
            .count()
    }

    /// The distinct `webhook-id`s delivered (answered 2xx).
    pub fn delivered_ids(&self) -> BTreeSet<String> {
        let state = self.state.lock().unwrap();
        state
            .deliveries
            .iter()
            .filter(|d| (200..300).contains(&d.status))
            .map(|d| d.id.clone())
            .collect()
    }

    /// Why each refused (401) request was refused, in arrival order.
    pub fn rejected(&self) -> Vec<String> {
        self.state.lock().unwrap().rejected.clone()
    }

    /// Every request received, verified or not.
    pub fn request_count(&self) -> usize {
        self.state.lock().unwrap().requests
    }
}

/// Handles one webhook request.
async fn receive(
    keys: &[Vec<u8>],
    state: &Mutex<ReceiverState>,
    parts: Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let verified = verify_webhook(keys, &parts, &body, unix_now());
    let reply = {
        let mut state = state.lock().unwrap();
        state.requests += 1;
        match &verified {
            Err(why) => {
                state.rejected.push(why.clone());
                None
            }
            Ok(_) => Some(state.script.pop_front()),
        }
    };
    let Some(reply) = reply else {
        return respond(
            401,
            &[],
            "text/plain",
            format!("signature rejected: {}", verified.unwrap_err()),
        );
    };
    let (id, timestamp) = verified.expect("checked above");
    let holds = {
        let mut state = state.lock().unwrap();
        let holds = state.hold.as_deref() == Some(id.as_str());
        state.held += usize::from(holds);
        holds
    };
    if holds {
        // Never answered: the client gives up or dies; the server drops the task with it.
        std::future::pending::<()>().await;
    }
    let (status, response) = match reply {
        None => (204, respond(204, &[], "text/plain", String::new())),
        Some(Reply::Status {
            status,
            retry_after,
            body,
        }) => {
            let headers: Vec<(&str, &str)> = retry_after
                .iter()
                .map(|value| ("retry-after", value.as_str()))
                .collect();
            (status, respond(status, &headers, "text/plain", body))
        }
        Some(Reply::Stall(duration)) => {
            // The receiver's scripted stall (what the test asked of it).
            tokio::time::sleep(duration).await;
            (503, respond(503, &[], "text/plain", "stalled".to_string()))
        }
    };
    state.lock().unwrap().deliveries.push(Delivery {
        id,
        timestamp,
        content_type: header(&parts, "content-type"),
        body: body.to_vec(),
        status,
        traceparent: header(&parts, "traceparent"),
        tracestate: header(&parts, "tracestate"),
    });
    response
}

/// Checks a request's Standard Webhooks headers against `keys`; returns (id, timestamp) or why not.
pub fn verify_webhook(
    keys: &[Vec<u8>],
    parts: &Parts,
    body: &[u8],
    now: u64,
) -> Result<(String, u64), String> {
    let id = header(parts, "webhook-id").ok_or("missing webhook-id")?;
    let timestamp = header(parts, "webhook-timestamp").ok_or("missing webhook-timestamp")?;
    let signatures = header(parts, "webhook-signature").ok_or("missing webhook-signature")?;
    let seconds: u64 = timestamp
        .parse()
        .map_err(|_| format!("bad webhook-timestamp `{timestamp}`"))?;
    if seconds.abs_diff(now) > TIMESTAMP_TOLERANCE_SECS {
        return Err(format!(
            "webhook-timestamp {seconds} too far from now ({now})"
        ));
    }
    let mut signed = Vec::with_capacity(id.len() + timestamp.len() + body.len() + 2);
    signed.extend_from_slice(format!("{id}.{timestamp}.").as_bytes());
    signed.extend_from_slice(body);
    for signature in signatures.split(' ') {
        let Some(encoded) = signature.strip_prefix("v1,") else {
            continue;
        };
        let Ok(expected) = STANDARD.decode(encoded) else {
            continue;
        };
        if keys
            .iter()
            .any(|key| hmac_sha256(key, &signed).verify_slice(&expected).is_ok())
        {
            return Ok((id, seconds));
        }
    }
    Err(format!("no valid v1 signature in `{signatures}`"))
}

// ---------------------------------------------------------------------------------------------
// Fake Tencent Cloud IM
// ---------------------------------------------------------------------------------------------

/// The IM REST APIs the fake serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImApi {
    /// `v4/group_open_http_svc/send_group_msg`.
    SendGroupMsg,
    /// `v4/group_open_http_svc/send_group_system_notification`.
    SendGroupSystemNotification,
}

/// A scripted IM answer for one upcoming (valid) request.
#[derive(Clone, Debug)]
pub enum ImReply {
    /// HTTP 200 with `ActionStatus: FAIL` and this `ErrorCode`.
    ErrorCode(i64),
    /// A bare HTTP status (e.g. 502), optional `Retry-After`.
    Http(Reply),
}

/// One request the fake IM received (every field shows in a failed assertion's `{:?}`).
#[derive(Clone, Debug)]
#[allow(dead_code)] // read through Debug only
pub struct ImRequest {
    /// The API called, `None` for an unknown path.
    pub api: Option<ImApi>,
    /// The query string's `random`.
    pub random: Option<u32>,
    /// The JSON body (`Null` if it did not parse).
    pub body: Value,
    /// `ErrorCode` answered (0 for success), or the HTTP status when answered without JSON.
    pub answered: i64,
}

/// A message the fake IM accepted and stored (what group members would see; every field shows
/// in a failed assertion's `{:?}`).
#[derive(Clone, Debug)]
#[allow(dead_code)] // read through Debug only
pub struct ImMessage {
    /// How it was sent.
    pub api: ImApi,
    /// `GroupId`.
    pub group_id: String,
    /// The body's `Random` (group messages only).
    pub random: Option<u32>,
    /// `event_id` from the event JSON in `Data` / `Content`.
    pub event_id: Option<String>,
    /// `Desc` of a group message.
    pub desc: Option<String>,
    /// The whole request body.
    pub body: Value,
}

/// What the fake has seen.
#[derive(Default)]
struct ImState {
    script: VecDeque<ImReply>,
    requests: Vec<ImRequest>,
    messages: BTreeMap<String, Vec<ImMessage>>,
    rejected: Vec<String>,
}

/// The app credentials the fake checks usersigs against.
struct ImApp {
    sdkappid: u64,
    identifier: String,
    secret_key: String,
}

/// A fake Tencent Cloud IM REST endpoint on loopback. Validates the query string (sdkappid,
/// identifier, usersig, random, contenttype=json) and the UserSig (decoded and its HMAC verified
/// with the app's key, its expiry checked), answering IM-style JSON errors (`70009`, `70013`,
/// `70014`, `70001`, `60002`, `10004`) on failure; stores accepted messages per group, dropping a
/// group message whose `Random` was already accepted in that group (as IM does within its window);
/// and can be scripted to fail, answer given error codes or stall.
pub struct FakeIm {
    server: Server,
    state: Arc<Mutex<ImState>>,
}

impl FakeIm {
    /// Starts a fake for app `sdkappid` whose admin is `identifier`, signing key `secret_key`.
    pub async fn start(sdkappid: u64, identifier: &str, secret_key: &str) -> FakeIm {
        let app = Arc::new(ImApp {
            sdkappid,
            identifier: identifier.to_string(),
            secret_key: secret_key.to_string(),
        });
        let state = Arc::new(Mutex::new(ImState::default()));
        let shared = state.clone();
        let server = serve(move |parts, body| {
            let (app, state) = (app.clone(), shared.clone());
            async move { im_receive(&app, &state, parts, body).await }
        })
        .await;
        FakeIm { server, state }
    }

    /// The base URL to configure as the sink's `endpoint` (`http://127.0.0.1:<port>`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    /// Answers the next `n` valid requests with `reply` (after any already scripted).
    pub fn script(&self, n: usize, reply: ImReply) {
        self.state
            .lock()
            .unwrap()
            .script
            .extend(std::iter::repeat_n(reply, n));
    }

    /// Answers the next `n` valid requests with `ErrorCode` `code` (e.g. 10002 internal error).
    pub fn fail_next(&self, n: usize, code: i64) {
        self.script(n, ImReply::ErrorCode(code));
    }

    /// Holds the next `n` valid requests for `duration`, then answers HTTP 503.
    pub fn stall_next(&self, n: usize, duration: Duration) {
        self.script(n, ImReply::Http(Reply::Stall(duration)));
    }

    /// Every request received, in arrival order.
    pub fn requests(&self) -> Vec<ImRequest> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The messages stored for group `group_id` (accepted, deduplicated by `Random`).
    pub fn messages(&self, group_id: &str) -> Vec<ImMessage> {
        self.state
            .lock()
            .unwrap()
            .messages
            .get(group_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Every stored message, all groups.
    pub fn all_messages(&self) -> Vec<ImMessage> {
        self.state
            .lock()
            .unwrap()
            .messages
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    /// The distinct `Random` values of all requests (accepted or not) to group `group_id`.
    pub fn distinct_randoms(&self, group_id: &str) -> BTreeSet<u32> {
        let state = self.state.lock().unwrap();
        state
            .requests
            .iter()
            .filter(|request| request.body.get("GroupId").and_then(Value::as_str) == Some(group_id))
            .filter_map(|request| request.body.get("Random").and_then(Value::as_u64))
            .filter_map(|random| u32::try_from(random).ok())
            .collect()
    }

    /// The distinct event ids among stored messages.
    pub fn distinct_event_ids(&self) -> BTreeSet<String> {
        self.all_messages()
            .into_iter()
            .filter_map(|message| message.event_id)
            .collect()
    }

    /// Why each refused request was refused (usersig, query or body problems), in order.
    pub fn rejected(&self) -> Vec<String> {
        self.state.lock().unwrap().rejected.clone()
    }
}

/// An IM JSON answer.
fn im_answer(code: i64, info: &str) -> Response<Full<Bytes>> {
    let status = if code == 0 { "OK" } else { "FAIL" };
    let body = json!({ "ActionStatus": status, "ErrorCode": code, "ErrorInfo": info });
    respond(200, &[], "application/json", body.to_string())
}

/// Handles one IM request.
async fn im_receive(
    app: &ImApp,
    state: &Mutex<ImState>,
    parts: Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let api = match parts.uri.path() {
        "/v4/group_open_http_svc/send_group_msg" => Some(ImApi::SendGroupMsg),
        "/v4/group_open_http_svc/send_group_system_notification" => {
            Some(ImApi::SendGroupSystemNotification)
        }
        _ => None,
    };
    let query = parse_query(parts.uri.query().unwrap_or_default());
    let random = query
        .get("random")
        .and_then(|value| value.parse::<u32>().ok());
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let checked = check_im_request(app, api, &query, &json, unix_now());

    let record = |state: &mut ImState, answered: i64| {
        state.requests.push(ImRequest {
            api,
            random,
            body: json.clone(),
            answered,
        });
    };
    let reply = {
        let mut state = state.lock().unwrap();
        match &checked {
            Err((code, why)) => {
                state.rejected.push(why.clone());
                record(&mut state, *code);
                return im_answer(*code, why);
            }
            Ok(_) => state.script.pop_front(),
        }
    };
    let api = checked.expect("checked above");
    match reply {
        Some(ImReply::ErrorCode(code)) => {
            record(&mut state.lock().unwrap(), code);
            im_answer(code, "scripted error")
        }
        Some(ImReply::Http(Reply::Status {
            status,
            retry_after,
            body,
        })) => {
            record(&mut state.lock().unwrap(), i64::from(status));
            let headers: Vec<(&str, &str)> = retry_after
                .iter()
                .map(|value| ("retry-after", value.as_str()))
                .collect();
            respond(status, &headers, "text/plain", body)
        }
        Some(ImReply::Http(Reply::Stall(duration))) => {
            // The receiver's scripted stall (what the test asked of it).
            tokio::time::sleep(duration).await;
            record(&mut state.lock().unwrap(), 503);
            respond(503, &[], "text/plain", "stalled".to_string())
        }
        None => {
            let mut state = state.lock().unwrap();
            record(&mut state, 0);
            store_message(&mut state, api, &json);
            im_answer(0, "")
        }
    }
}

/// Stores an accepted message unless its group already holds one with the same `Random`.
fn store_message(state: &mut ImState, api: ImApi, json: &Value) {
    let group_id = json["GroupId"].as_str().unwrap_or_default().to_string();
    let random = json
        .get("Random")
        .and_then(Value::as_u64)
        .and_then(|random| u32::try_from(random).ok());
    let (event_json, desc) = match api {
        ImApi::SendGroupMsg => (
            json["MsgBody"][0]["MsgContent"]["Data"].as_str(),
            json["MsgBody"][0]["MsgContent"]["Desc"]
                .as_str()
                .map(str::to_string),
        ),
        ImApi::SendGroupSystemNotification => (json["Content"].as_str(), None),
    };
    let event_id = event_json
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .and_then(|event| event["event_id"].as_str().map(str::to_string));
    let messages = state.messages.entry(group_id.clone()).or_default();
    if random.is_some() && messages.iter().any(|message| message.random == random) {
        return; // IM's dedupe: same Random in the same group
    }
    messages.push(ImMessage {
        api,
        group_id,
        random,
        event_id,
        desc,
        body: json.clone(),
    });
}

/// Splits a query string into decoded (name, value) pairs (the last of a repeated name wins).
fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

/// Decodes `%XX` escapes (and `+` as space); a malformed escape is kept as-is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = (bytes[index] == b'%')
            .then(|| bytes.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (escaped, bytes[index]) {
            (Some(byte), _) => {
                out.push(byte);
                index += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, byte) => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Validates an IM request; returns its API or (IM error code, why).
fn check_im_request(
    app: &ImApp,
    api: Option<ImApi>,
    query: &BTreeMap<String, String>,
    json: &Value,
    now: u64,
) -> Result<ImApi, (i64, String)> {
    let api = api.ok_or((60009, "unknown API path".to_string()))?;
    let param = |name: &str| {
        query
            .get(name)
            .ok_or((60002, format!("query string lacks `{name}`")))
    };
    if param("sdkappid")? != &app.sdkappid.to_string() {
        return Err((60002, "query sdkappid does not match the app".to_string()));
    }
    if param("identifier")? != &app.identifier {
        return Err((60002, "query identifier is not the app admin".to_string()));
    }
    if param("random")?.parse::<u32>().is_err() {
        return Err((
            60002,
            "query random is not a 32-bit unsigned integer".to_string(),
        ));
    }
    if param("contenttype")? != "json" {
        return Err((60002, "query contenttype is not json".to_string()));
    }
    verify_usersig(app, param("usersig")?, now)?;
    if !json.is_object() {
        return Err((60003, "body is not a JSON object".to_string()));
    }
    if json["GroupId"].as_str().is_none_or(str::is_empty) {
        return Err((10004, "GroupId missing".to_string()));
    }
    match api {
        ImApi::SendGroupMsg => {
            if json["Random"]
                .as_u64()
                .is_none_or(|random| random > u64::from(u32::MAX))
            {
                return Err((
                    10004,
                    "Random missing or not a 32-bit unsigned integer".to_string(),
                ));
            }
            if json["MsgBody"].as_array().is_none_or(Vec::is_empty) {
                return Err((10004, "MsgBody missing or empty".to_string()));
            }
        }
        ImApi::SendGroupSystemNotification => {
            if json["Content"].as_str().is_none_or(str::is_empty) {
                return Err((10004, "Content missing".to_string()));
            }
        }
    }
    Ok(api)
}

/// Decodes a TLSSigAPIv2 usersig and checks it: TLS.ver 2.0, identifier and sdkappid match,
/// not expired, and TLS.sig is the HMAC-SHA256 of the signed fields under the app's key.
pub fn verify_usersig_parts(
    sdkappid: u64,
    identifier: &str,
    secret_key: &str,
    usersig: &str,
    now: u64,
) -> Result<(), (i64, String)> {
    let base64: String = usersig
        .chars()
        .map(|c| match c {
            '*' => '+',
            '-' => '/',
            '_' => '=',
            c => c,
        })
        .collect();
    let undecodable = |what: &str| (70003, format!("usersig {what}"));
    let compressed = STANDARD
        .decode(base64)
        .map_err(|_| undecodable("is not base64"))?;
    let document = miniz_oxide::inflate::decompress_to_vec_zlib(&compressed)
        .map_err(|_| undecodable("is not zlib"))?;
    let document: Value =
        serde_json::from_slice(&document).map_err(|_| undecodable("is not JSON"))?;
    if document["TLS.ver"] != "2.0" {
        return Err(undecodable("has no TLS.ver 2.0"));
    }
    let doc_identifier = document["TLS.identifier"]
        .as_str()
        .ok_or_else(|| undecodable("lacks TLS.identifier"))?;
    let doc_sdkappid = document["TLS.sdkappid"]
        .as_u64()
        .ok_or_else(|| undecodable("lacks TLS.sdkappid"))?;
    let time = document["TLS.time"]
        .as_u64()
        .ok_or_else(|| undecodable("lacks TLS.time"))?;
    let expire = document["TLS.expire"]
        .as_u64()
        .ok_or_else(|| undecodable("lacks TLS.expire"))?;
    let sig = document["TLS.sig"]
        .as_str()
        .ok_or_else(|| undecodable("lacks TLS.sig"))?;
    if doc_identifier != identifier {
        return Err((
            70013,
            format!("usersig identifier `{doc_identifier}` is not `{identifier}`"),
        ));
    }
    if doc_sdkappid != sdkappid {
        return Err((
            70014,
            format!("usersig sdkappid {doc_sdkappid} is not {sdkappid}"),
        ));
    }
    let content = format!(
        "TLS.identifier:{doc_identifier}\nTLS.sdkappid:{doc_sdkappid}\nTLS.time:{time}\nTLS.expire:{expire}\n"
    );
    let expected = STANDARD
        .decode(sig)
        .map_err(|_| undecodable("TLS.sig is not base64"))?;
    hmac_sha256(secret_key.as_bytes(), content.as_bytes())
        .verify_slice(&expected)
        .map_err(|_| (70009, "usersig HMAC does not verify".to_string()))?;
    if time.saturating_add(expire) < now {
        return Err((70001, "usersig expired".to_string()));
    }
    Ok(())
}

/// [`verify_usersig_parts`] with the fake's app credentials.
fn verify_usersig(app: &ImApp, usersig: &str, now: u64) -> Result<(), (i64, String)> {
    verify_usersig_parts(app.sdkappid, &app.identifier, &app.secret_key, usersig, now)
}
