//! The console without a browser: the JSON of every page, the action token, sessions and CSRF,
//! security headers, escaping of database values, and the actions doing what they say.

use crate::console::host::{DEADLINE, FAILED_ROWS, Host, TOKEN, TRACEPARENT, XSS_TYPE, request};
use crate::support::{Backend, typed_record, wait_until};
use outboxd::plugin::pause::PAUSED_RETRY;

crate::support::per_backend!(json_pages_and_actions, access_and_escaping);

fn bearer() -> Vec<String> {
    vec![format!("Authorization: Bearer {TOKEN}")]
}

/// The value of the series `series` (name and labels, as printed) in the `/metrics` text;
/// `None` when it is not there.
fn metric(metrics: &str, series: &str) -> Option<u128> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        Some(
            value
                .parse()
                .unwrap_or_else(|e| panic!("{series}: {value:?}: {e}")),
        )
    })
}

/// Every `/api/…` answers; requeue (dry run, then run) brings a dead letter back and it is
/// delivered; pause makes a new event wait without an attempt, resume lets it through.
async fn json_pages_and_actions(backend: Backend) {
    let Some(host) = Host::start(backend).await else {
        return;
    };
    let addr = host.addr;
    wait_until("the overview counts the failed rows", DEADLINE, || async {
        let overview = request(addr, "GET", "/api/overview", &[], "").await.json();
        match overview["table"][0]["counts"]["failed"].as_u64() {
            Some(FAILED_ROWS) => Ok(()),
            other => Err(other),
        }
    })
    .await;
    let overview = request(addr, "GET", "/api/overview", &[], "").await.json();
    assert_eq!(overview["rates"].as_array().unwrap().len(), 360);
    assert_eq!(overview["sinks"][0]["name"], "log");
    let events = request(addr, "GET", "/api/events?status=failed&type=Room*", &[], "")
        .await
        .json();
    let ids: Vec<&str> = events["page"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["dead-5", "dead-4", "dead-3", "dead-2", "dead-1", "dead-0"]
    );
    let bad = request(addr, "GET", "/api/events?since=yesterday", &[], "").await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.json()["error"]
            .as_str()
            .unwrap()
            .starts_with("since \"yesterday\"")
    );
    let event = request(addr, "GET", "/api/event?app=default&id=dead-0", &[], "")
        .await
        .json();
    assert_eq!(event["row"]["status"], "failed");
    assert_eq!(event["route"][1], "log");
    assert_eq!(event["envelope"]["Ok"]["traceparent"], TRACEPARENT);
    assert_eq!(
        event["envelope"]["Ok"]["trace_id"],
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    let page = request(addr, "GET", "/event?app=default&id=dead-0", &[], "")
        .await
        .body;
    assert!(
        page.contains("trace id 4bf92f3577b34da6a3ce929d0e0e4736"),
        "the event page shows the trace id"
    );
    let link = "http://jaeger.example:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736";
    assert_eq!(event["trace_link"], link);
    assert!(
        page.contains(&format!("<a href=\"{link}\"")),
        "the event page links to the trace ([telemetry] trace_url)"
    );
    assert_eq!(
        event["delivery_trace_id"],
        serde_json::Value::Null,
        "traced"
    );
    // An event the producer did not trace: the trace outboxd's delivery spans started.
    let untraced = request(addr, "GET", "/api/event?app=default&id=dead-1", &[], "")
        .await
        .json();
    let own = untraced["delivery_trace_id"].as_str().unwrap().to_string();
    assert_eq!(
        own,
        outboxd::telemetry::delivery_trace_id("default", "dead-1")
    );
    assert_eq!(own.len(), 32);
    assert_eq!(
        untraced["trace_link"],
        format!("http://jaeger.example:16686/trace/{own}")
    );
    let page = request(addr, "GET", "/event?app=default&id=dead-1", &[], "")
        .await
        .body;
    assert!(page.contains(&own), "the event page shows outboxd's trace");
    assert_eq!(
        request(addr, "GET", "/api/event?app=default&id=none", &[], "")
            .await
            .status,
        404
    );
    let dead = request(addr, "GET", "/api/dead", &[], "").await.json();
    assert_eq!(dead["groups"][0]["count"], 4);
    assert_eq!(
        dead["groups"][0]["last_error"],
        "HTTP 503 from the receiver"
    );
    let sinks = request(addr, "GET", "/api/sinks", &[], "").await.json();
    assert_eq!(sinks["sinks"][0]["sha256"].as_str().map(str::len), Some(64));
    assert_eq!(sinks["routes"][0][0], "Room*");

    // Requeue the 503 group: a dry run counts 4, the run moves them, they are delivered.
    let form = "app=default&scope=filter&group=HTTP+503+from+the+receiver";
    let count = request(
        addr,
        "POST",
        "/api/actions/requeue",
        &bearer(),
        &format!("{form}&step=count"),
    )
    .await;
    assert_eq!(count.json()["matching"], 4, "{}", count.body);
    let job = request(
        addr,
        "POST",
        "/api/actions/requeue",
        &bearer(),
        &format!("{form}&step=run"),
    )
    .await;
    assert_eq!(job.status, 202, "{}", job.body);
    let job_id = job.json()["id"].as_u64().unwrap();
    for id in ["dead-0", "dead-1", "dead-2", "dead-3"] {
        host.wait_status(id, "delivered").await;
    }
    let job = request(addr, "GET", &format!("/api/jobs?id={job_id}"), &[], "")
        .await
        .json();
    assert_eq!(
        (job["done"].as_u64(), job["finished"].as_bool()),
        (Some(4), Some(true))
    );
    assert_eq!(
        host.db.row("default", "dead-4").await.unwrap().status,
        "failed",
        "other groups stay"
    );

    // Pause: a new event waits retryable, no attempt spent; resume: delivered.
    let pause = request(addr, "POST", "/api/actions/pause", &bearer(), "sink=log").await;
    assert_eq!(pause.json()["changed"], true, "{}", pause.body);
    let enqueued = std::time::Instant::now();
    host.store
        .enqueue(&[typed_record(
            "default",
            "while-paused",
            "room-3",
            "RoomGiftSent",
            outboxd::record::now_ms(),
        )])
        .await
        .unwrap();
    host.wait_status("while-paused", "retryable").await;
    let row = host.db.row("default", "while-paused").await.unwrap();
    assert_eq!(row.retry_count, 0);
    assert!(row.last_error.unwrap().contains("paused"));
    let paused = request(addr, "GET", "/api/sinks", &[], "").await.json();
    assert!(
        paused["sinks"][0]["state"]["paused_by"]
            .as_str()
            .unwrap()
            .contains("bearer token")
    );
    let resume = request(addr, "POST", "/api/actions/resume", &bearer(), "sink=log").await;
    assert_eq!(resume.json()["changed"], true);
    // while-paused was deferred once, then waits PAUSED_RETRY before it is claimed again: a
    // resume within that time leaves it at one deferral (a slower one, one more per period).
    let paused_for = enqueued.elapsed();
    let deferrals = 1 + paused_for.as_millis() / PAUSED_RETRY.as_millis();
    host.wait_status("while-paused", "delivered").await;
    let unknown = request(addr, "POST", "/api/actions/pause", &bearer(), "sink=nope").await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.body.contains("no sink named"));

    // Purge one event.
    let purge = request(
        addr,
        "POST",
        "/api/actions/purge",
        &bearer(),
        "app=default&ids=dead-5&step=run",
    )
    .await;
    assert_eq!(purge.status, 202);
    wait_until("dead-5 purged", DEADLINE, || async {
        match host.db.row("default", "dead-5").await {
            None => Ok(()),
            Some(row) => Err(row.status),
        }
    })
    .await;
    // The purge job counts itself after its delete commits: the row can be gone a moment
    // before the counter moves.
    let purged = r#"outboxd_console_actions_total{action="purge",result="done"} 1"#;
    let metrics = wait_until("the purge counted", DEADLINE, || async {
        let body = request(addr, "GET", "/metrics", &[], "").await.body;
        if body.lines().any(|line| line == purged) {
            Ok(body)
        } else {
            Err(body
                .lines()
                .filter(|l| l.contains("actions_total"))
                .collect::<Vec<_>>()
                .join("\n"))
        }
    })
    .await;
    for line in [
        r#"outboxd_console_actions_total{action="requeue",result="done"} 1"#,
        r#"outboxd_console_actions_total{action="pause",result="done"} 1"#,
        purged,
    ] {
        assert!(metrics.lines().any(|l| l == line), "missing {line}");
    }
    // The paused sink answered while-paused `deferred` (no other event came to it paused).
    let deferred = metric(
        &metrics,
        r#"outboxd_sink_events_total{sink="log",outcome="deferred"}"#,
    );
    if paused_for < PAUSED_RETRY {
        assert_eq!(
            deferred,
            Some(1),
            "the log sink's deferred events; /metrics:\n{metrics}"
        );
    } else {
        assert!(
            deferred.is_some_and(|n| (1..=deferrals).contains(&n)),
            "{deferred:?} deferred, paused for {paused_for:?}: {metrics}"
        );
    }
    host.stop().await;
}

/// Actions without the token are refused naming the way in; a wrong token too; a session form
/// needs its CSRF token; every page has the strict CSP; markup from the database is text.
async fn access_and_escaping(backend: Backend) {
    let Some(host) = Host::start(backend).await else {
        return;
    };
    let addr = host.addr;
    let none = request(
        addr,
        "POST",
        "/api/actions/requeue",
        &[],
        "ids=dead-0&step=run",
    )
    .await;
    assert_eq!(none.status, 403, "{}", none.body);
    assert!(
        none.json()["error"]
            .as_str()
            .unwrap()
            .contains("[admin] token"),
        "{}",
        none.body
    );
    let wrong = request(
        addr,
        "POST",
        "/api/actions/pause",
        &["Authorization: Bearer nope-nope-nope-nope".into()],
        "sink=log",
    )
    .await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    let form = request(addr, "POST", "/actions/pause", &[], "sink=log").await;
    assert_eq!(form.status, 403);
    assert!(
        form.body.contains("actions need [admin] token"),
        "{}",
        form.body
    );

    let bad_login = request(addr, "POST", "/login", &[], "token=wrong").await;
    assert_eq!(bad_login.status, 401);
    let login = request(addr, "POST", "/login", &[], &format!("token={TOKEN}")).await;
    assert_eq!(login.status, 303);
    let cookie = login.header("set-cookie").expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = vec![format!("Cookie: {}", cookie.split(';').next().unwrap())];
    let no_csrf = request(addr, "POST", "/actions/pause", &session, "sink=log").await;
    assert_eq!(no_csrf.status, 403);
    assert!(no_csrf.body.contains("CSRF"), "{}", no_csrf.body);
    let page = request(addr, "GET", "/sinks", &session, "").await;
    let csrf = page
        .body
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF field")
        .to_string();
    let mut cross = session.clone();
    cross.push("Origin: https://evil.example".into());
    let cross_site = request(
        addr,
        "POST",
        "/actions/pause",
        &cross,
        &format!("sink=log&csrf={csrf}"),
    )
    .await;
    assert_eq!(cross_site.status, 403);
    assert!(cross_site.body.contains("another site"));
    let paused = request(
        addr,
        "POST",
        "/actions/pause",
        &session,
        &format!("sink=log&csrf={csrf}"),
    )
    .await;
    assert_eq!(paused.status, 303, "{}", paused.body);
    assert!(
        paused
            .header("location")
            .unwrap()
            .starts_with("/sinks?notice=")
    );
    assert!(
        request(addr, "GET", "/sinks", &session, "")
            .await
            .body
            .contains("paused by")
    );

    for path in [
        "/",
        "/events",
        "/dead",
        "/sinks",
        "/event?app=default&id=xss-1",
        "/login",
    ] {
        let answer = request(addr, "GET", path, &[], "").await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        let csp = answer.header("content-security-policy").expect("CSP");
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert_eq!(answer.header("x-frame-options").as_deref(), Some("DENY"));
        assert!(
            !answer.body.contains(XSS_TYPE),
            "{path} has the markup unescaped"
        );
        assert!(
            !answer.body.contains("<b>bold</b>"),
            "{path} has the error's markup unescaped"
        );
        assert!(
            !answer.body.contains("<i>2</i>"),
            "{path} has the room's markup unescaped"
        );
    }
    let events = request(addr, "GET", "/events?status=failed", &[], "")
        .await
        .body;
    assert!(
        events.contains("&lt;script&gt;window.__xss=1&lt;/script&gt;"),
        "the type shows as text"
    );
    assert!(events.contains("room-&lt;i&gt;2&lt;/i&gt;"));
    let dead = request(addr, "GET", "/dead", &[], "").await.body;
    assert!(dead.contains("&lt;b&gt;bold&lt;/b&gt; refusal"));
    host.stop().await;
}
