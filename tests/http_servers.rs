//! Self-test of the loopback test servers in `tests/http`: driven with a plain hyper client, the
//! webhook receiver and the fake IM accept correct signatures, refuse wrong ones, and answer the
//! scripted failures.

use crate::http;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use http::{FakeIm, ImApi, Reply, WebhookReceiver};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::net::TcpStream;

/// A plain HTTP/1 answer.
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: String,
}

/// POSTs `body` with `headers` to `url` over a fresh connection.
async fn post(url: &str, headers: &[(&str, String)], body: Vec<u8>) -> Answer {
    let uri: Uri = url.parse().expect("valid URL");
    let authority = uri.authority().expect("URL has a host").to_string();
    let stream = TcpStream::connect(&authority)
        .await
        .expect("connect to the test server");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut request = Request::post(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
        .header("host", authority);
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let response = sender
        .send_request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .expect("response");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Answer {
        status,
        retry_after,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A Standard Webhooks `v1,` signature, computed here independently of the receiver.
fn webhook_signature(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The three Standard Webhooks headers for `body`.
fn webhook_headers(
    key: &[u8],
    id: &str,
    timestamp: u64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    vec![
        ("webhook-id", id.to_string()),
        ("webhook-timestamp", timestamp.to_string()),
        (
            "webhook-signature",
            webhook_signature(key, id, timestamp, body),
        ),
        ("content-type", "application/json".to_string()),
    ]
}

#[tokio::test]
async fn webhook_receiver_verifies_signatures() {
    // "whsec_" + base64("secret-one") and base64("secret-two").
    let receiver =
        WebhookReceiver::start(&["whsec_c2VjcmV0LW9uZQ==", "whsec_c2VjcmV0LXR3bw=="]).await;
    let body = br#"{"event_id":"e1"}"#.to_vec();
    let now = unix_now();

    let good = post(
        &receiver.url(),
        &webhook_headers(b"secret-one", "e1", now, &body),
        body.clone(),
    )
    .await;
    assert_eq!(good.status, 204);
    // Rotation: a header with a wrong and a right signature is accepted.
    let mut rotated = webhook_headers(b"secret-two", "e2", now, &body);
    rotated[2].1 = format!(
        "{} {}",
        webhook_signature(b"old-key", "e2", now, &body),
        rotated[2].1
    );
    assert_eq!(
        post(&receiver.url(), &rotated, body.clone()).await.status,
        204
    );

    let wrong_key = post(
        &receiver.url(),
        &webhook_headers(b"not-the-secret", "e3", now, &body),
        body.clone(),
    )
    .await;
    assert_eq!(wrong_key.status, 401);
    let tampered = post(
        &receiver.url(),
        &webhook_headers(b"secret-one", "e4", now, &body),
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(tampered.status, 401);
    let stale = post(
        &receiver.url(),
        &webhook_headers(b"secret-one", "e5", now - 3600, &body),
        body.clone(),
    )
    .await;
    assert_eq!(stale.status, 401);
    let unsigned = post(
        &receiver.url(),
        &[("webhook-id", "e6".to_string())],
        body.clone(),
    )
    .await;
    assert_eq!(unsigned.status, 401);

    assert_eq!(receiver.request_count(), 6);
    assert_eq!(receiver.rejected().len(), 4);
    assert_eq!(
        receiver.delivered_ids().into_iter().collect::<Vec<_>>(),
        vec!["e1", "e2"]
    );
    let first = &receiver.deliveries()[0];
    assert_eq!(
        (first.id.as_str(), first.timestamp, first.body.as_slice()),
        ("e1", now, body.as_slice())
    );
    assert_eq!(first.content_type.as_deref(), Some("application/json"));
}

#[tokio::test]
async fn webhook_receiver_answers_scripted_failures_and_stalls() {
    let receiver = WebhookReceiver::start(&["whsec_c2VjcmV0"]).await;
    receiver.script(2, Reply::status(503).retry_after("1"));
    receiver.script(1, Reply::status(410));
    receiver.script(1, Reply::Stall(Duration::from_millis(300)));
    let body = b"payload".to_vec();
    let send = async || {
        post(
            &receiver.url(),
            &webhook_headers(b"secret", "evt", unix_now(), &body),
            body.clone(),
        )
        .await
    };

    // A refused signature does not consume the script.
    let bad = post(
        &receiver.url(),
        &webhook_headers(b"wrong", "evt", unix_now(), &body),
        body.clone(),
    )
    .await;
    assert_eq!(bad.status, 401);

    for _ in 0..2 {
        let answer = send().await;
        assert_eq!(
            (answer.status, answer.retry_after.as_deref()),
            (503, Some("1"))
        );
    }
    assert_eq!(send().await.status, 410);
    let started = Instant::now();
    let stalled = send().await;
    assert_eq!(stalled.status, 503);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(send().await.status, 204);

    assert_eq!(receiver.attempts("evt"), 5);
    assert_eq!(receiver.delivered_count("evt"), 1);
}

/// A TLSSigAPIv2 usersig, made here independently of the fake and of the plugin.
fn usersig(sdkappid: u64, identifier: &str, key: &str, time: u64, expire: u64) -> String {
    let content = format!(
        "TLS.identifier:{identifier}\nTLS.sdkappid:{sdkappid}\nTLS.time:{time}\nTLS.expire:{expire}\n"
    );
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(content.as_bytes());
    let document = json!({
        "TLS.ver": "2.0", "TLS.identifier": identifier, "TLS.sdkappid": sdkappid,
        "TLS.time": time, "TLS.expire": expire, "TLS.sig": STANDARD.encode(mac.finalize().into_bytes()),
    });
    let compressed = miniz_oxide::deflate::compress_to_vec_zlib(document.to_string().as_bytes(), 6);
    STANDARD
        .encode(compressed)
        .replace('+', "*")
        .replace('/', "-")
        .replace('=', "_")
}

const APP: u64 = 1_400_000_001;

fn im_url(im: &FakeIm, api: &str, sig: &str, random: u32) -> String {
    format!(
        "{}/v4/group_open_http_svc/{api}?sdkappid={APP}&identifier=admin&usersig={sig}&random={random}&contenttype=json",
        im.endpoint()
    )
}

fn group_msg(group: &str, random: u32, event_id: &str) -> Vec<u8> {
    json!({
        "GroupId": group,
        "Random": random,
        "MsgBody": [{"MsgType": "TIMCustomElem", "MsgContent": {
            "Data": json!({"event_id": event_id}).to_string(), "Desc": "room.created"}}],
    })
    .to_string()
    .into_bytes()
}

fn error_code(answer: &Answer) -> i64 {
    let json: Value = serde_json::from_str(&answer.body).expect("IM answers JSON");
    json["ErrorCode"].as_i64().unwrap()
}

#[tokio::test]
async fn fake_im_validates_usersig_and_query() {
    let im = FakeIm::start(APP, "admin", "im-key").await;
    let now = unix_now();
    let good = usersig(APP, "admin", "im-key", now, 86_400);

    let ok = post(
        &im_url(&im, "send_group_msg", &good, 7),
        &[],
        group_msg("room_r1", 7, "e1"),
    )
    .await;
    assert_eq!((ok.status, error_code(&ok)), (200, 0));

    let wrong_key = usersig(APP, "admin", "other-key", now, 86_400);
    let answer = post(
        &im_url(&im, "send_group_msg", &wrong_key, 8),
        &[],
        group_msg("room_r1", 8, "e2"),
    )
    .await;
    assert_eq!(error_code(&answer), 70009);
    let other_admin = usersig(APP, "root", "im-key", now, 86_400);
    let answer = post(
        &im_url(&im, "send_group_msg", &other_admin, 8),
        &[],
        group_msg("room_r1", 8, "e2"),
    )
    .await;
    assert_eq!(error_code(&answer), 70013);
    let expired = usersig(APP, "admin", "im-key", now - 1000, 10);
    let answer = post(
        &im_url(&im, "send_group_msg", &expired, 8),
        &[],
        group_msg("room_r1", 8, "e2"),
    )
    .await;
    assert_eq!(error_code(&answer), 70001);
    let answer = post(
        &im_url(&im, "send_group_msg", "garbage", 8),
        &[],
        group_msg("room_r1", 8, "e2"),
    )
    .await;
    assert_eq!(error_code(&answer), 70003);
    let no_json = im_url(&im, "send_group_msg", &good, 8).replace("&contenttype=json", "");
    assert_eq!(
        error_code(&post(&no_json, &[], group_msg("room_r1", 8, "e2")).await),
        60002
    );
    let no_random = json!({"GroupId": "room_r1", "MsgBody": []})
        .to_string()
        .into_bytes();
    assert_eq!(
        error_code(&post(&im_url(&im, "send_group_msg", &good, 8), &[], no_random).await),
        10004
    );

    let note =
        json!({"GroupId": "room_r2", "Content": json!({"event_id": "e9"}).to_string()}).to_string();
    let answer = post(
        &im_url(&im, "send_group_system_notification", &good, 9),
        &[],
        note.into_bytes(),
    )
    .await;
    assert_eq!(error_code(&answer), 0);

    assert_eq!(im.rejected().len(), 6);
    assert_eq!(im.requests().len(), 8);
    let stored = im.messages("room_r1");
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (
            stored[0].api,
            stored[0].random,
            stored[0].event_id.as_deref()
        ),
        (ImApi::SendGroupMsg, Some(7), Some("e1"))
    );
    assert_eq!(stored[0].desc.as_deref(), Some("room.created"));
    assert_eq!(
        im.messages("room_r2")[0].api,
        ImApi::SendGroupSystemNotification
    );
    assert_eq!(
        im.distinct_event_ids().into_iter().collect::<Vec<_>>(),
        vec!["e1", "e9"]
    );
}

#[tokio::test]
async fn fake_im_scripts_failures_and_dedupes_by_random() {
    let im = FakeIm::start(APP, "admin", "im-key").await;
    let sig = usersig(APP, "admin", "im-key", unix_now(), 600);
    im.fail_next(2, 10002);
    im.script(1, http::ImReply::Http(Reply::status(502).retry_after("2")));
    im.stall_next(1, Duration::from_millis(200));
    let send = async || {
        post(
            &im_url(&im, "send_group_msg", &sig, 42),
            &[],
            group_msg("g", 42, "e1"),
        )
        .await
    };

    assert_eq!(error_code(&send().await), 10002);
    assert_eq!(error_code(&send().await), 10002);
    let gateway = send().await;
    assert_eq!(
        (gateway.status, gateway.retry_after.as_deref()),
        (502, Some("2"))
    );
    let started = Instant::now();
    assert_eq!(send().await.status, 503);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(error_code(&send().await), 0);
    // The same Random again (a retry after a lost answer) is accepted but not shown twice.
    assert_eq!(error_code(&send().await), 0);

    assert_eq!(im.requests().len(), 6);
    assert_eq!(im.messages("g").len(), 1);
    assert_eq!(
        im.distinct_randoms("g").into_iter().collect::<Vec<_>>(),
        vec![42]
    );
    let answered: Vec<i64> = im.requests().iter().map(|r| r.answered).collect();
    assert_eq!(answered, vec![10002, 10002, 502, 503, 0, 0]);
}
