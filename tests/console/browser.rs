//! The console in a real browser: Debian's Chromium, headless, driven over WebDriver
//! (chromedriver) with fantoccini. Logs in, opens the overview, filters the failed list, requeues
//! one event and sees it delivered, pauses and resumes the sink, checks that an event type that
//! is markup shows as text, and saves a screenshot of each page under
//! `target/console-screenshots/`. Without Chromium it prints SKIPPED, and fails when `CI` is set
//! (`make test` installs it: the `browser` target).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};

use crate::console::host::{DEADLINE, FAILED_ROWS, Host, TOKEN, XSS_ROOM, XSS_TYPE};
use crate::support::{Backend, in_ci, typed_record, wait_until};

crate::support::per_backend!(the_console_in_chromium);

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver on a free port, killed on drop, with its own profile directory.
struct Driver {
    child: Child,
    port: u16,
    profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_driver() -> Option<Driver> {
    if !std::path::Path::new(CHROMIUM).exists() || !std::path::Path::new(CHROMEDRIVER).exists() {
        assert!(
            !in_ci(),
            "no {CHROMIUM} / {CHROMEDRIVER}: `make browser` installs them"
        );
        eprintln!(
            "SKIPPED (no Chromium at {CHROMIUM} with {CHROMEDRIVER}; `make browser` installs them)"
        );
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    Some(Driver {
        child,
        port,
        profile: tempfile::tempdir().unwrap(),
    })
}

async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,1000",
                format!("--user-data-dir={}", driver.profile.path().display()),
            ],
        }),
    );
    let url = format!("http://127.0.0.1:{}", driver.port);
    let mut last = None;
    for _ in 0..100 {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(client) => return client,
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot start a Chromium session: {last:?}");
}

async fn screenshot(client: &Client, backend: Backend, page: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = client.screenshot().await.expect("a screenshot");
    std::fs::write(dir.join(format!("{}-{page}.png", backend.name())), png).unwrap();
}

/// The text of `<main>`, read in one script call (the live refresh may replace the element).
async fn text(client: &Client) -> String {
    let value = client
        .execute("return document.querySelector('main').innerText", vec![])
        .await
        .unwrap();
    value.as_str().unwrap_or_default().to_string()
}

/// The text of the overview's shared-table cell in the row of app code `app` and the column
/// headed `column`, read in one script call; `None` while the table has no such row.
async fn shared_table_cell(client: &Client, app: &str, column: &str) -> Option<String> {
    let value = client
        .execute(
            r#"
            const [app, column] = arguments;
            const table = document.querySelector('main table.counts');
            if (!table) return null;
            const rows = [...table.querySelectorAll('tr')];
            const index = [...rows[0].querySelectorAll('th')]
                .map(th => th.textContent.trim())
                .indexOf(column);
            const row = rows.find(r => r.cells[0].tagName === 'TD'
                && r.cells[0].textContent.trim() === app);
            if (index < 0 || !row) return null;
            return row.cells[index].textContent.trim();
            "#,
            vec![app.into(), column.into()],
        )
        .await
        .unwrap();
    value.as_str().map(str::to_string)
}

/// The row of event `id` in the rows table of the page: `{rows, type, room, scripts}`, where
/// `type` and `room` are `{text, elements}` (the cell's text and how many elements it holds),
/// `rows` the table's rows and `scripts` the `<script>` elements in `<main>`; null without it.
async fn listed_row(client: &Client, id: &str) -> serde_json::Value {
    client
        .execute(
            r#"
            const [id] = arguments;
            const link = [...document.querySelectorAll('main table.rows tbody a')]
                .find(a => a.textContent === id);
            if (!link) return null;
            const row = link.closest('tr');
            const heads = [...row.closest('table').querySelectorAll('thead th')]
                .map(th => th.textContent);
            const cell = name => {
                const c = row.cells[heads.indexOf(name)];
                return { text: c.textContent, elements: c.children.length };
            };
            return {
                rows: row.closest('tbody').rows.length,
                type: cell('type'),
                room: cell('room'),
                scripts: document.querySelectorAll('main script').length,
            };
            "#,
            vec![id.into()],
        )
        .await
        .unwrap()
}

/// Waits until `<main>` says `needle` (a click's navigation finishes on its own time).
async fn wait_text(client: &Client, needle: &str) -> String {
    wait_until(&format!("the page says {needle:?}"), DEADLINE, || async {
        let main = text(client).await;
        if main.contains(needle) {
            Ok(main)
        } else {
            Err(main)
        }
    })
    .await
}

async fn the_console_in_chromium(backend: Backend) {
    let Some(driver) = start_driver() else { return };
    let Some(host) = Host::start(backend).await else {
        return;
    };
    let base = format!("http://{}", host.addr);
    let client = browser(&driver).await;

    // Reading works without logging in (loopback); the overview shows the shared table.
    client.goto(&format!("{base}/")).await.unwrap();
    // The shared table's `failed` cell of app code default: the rows `Host::start` failed.
    wait_until("the overview counts the failed rows", DEADLINE, || async {
        client.refresh().await.unwrap();
        match shared_table_cell(&client, "default", "failed").await {
            Some(failed) if failed == FAILED_ROWS.to_string() => Ok(()),
            other => Err(other),
        }
    })
    .await;
    let main = text(&client).await;
    assert!(
        main.contains("Shared table") && main.contains("This host"),
        "{main}"
    );
    screenshot(&client, backend, "overview").await;

    // Log in with the action token.
    client.goto(&format!("{base}/login")).await.unwrap();
    client
        .form(Locator::Css("form[action='/login']"))
        .await
        .unwrap()
        .set_by_name("token", TOKEN)
        .await
        .unwrap()
        .submit()
        .await
        .unwrap();
    wait_until("logged in", DEADLINE, || async {
        let who = client
            .execute(
                "return document.querySelector('header .who').innerText",
                vec![],
            )
            .await
            .unwrap();
        if who.as_str().is_some_and(|w| w.contains("may act")) {
            Ok(())
        } else {
            Err(who)
        }
    })
    .await;

    // Filter the failed list by type, select dead-2, requeue it, see it delivered.
    client.goto(&format!("{base}/dead")).await.unwrap();
    client
        .form(Locator::Css("form.search"))
        .await
        .unwrap()
        .set_by_name("type", "RoomGiftSent")
        .await
        .unwrap()
        .submit()
        .await
        .unwrap();
    let main = wait_until("the failed list filtered by type", DEADLINE, || async {
        let main = text(&client).await;
        if main.contains("dead-2") && !main.contains("dead-1") {
            Ok(main)
        } else {
            Err(main)
        }
    })
    .await;
    for id in ["dead-0", "dead-4"] {
        assert!(main.contains(id), "RoomGiftSent lists {id}: {main}");
    }
    for id in ["dead-3", "dead-5", "xss-1"] {
        assert!(!main.contains(id), "RoomGiftSent leaves out {id}: {main}");
    }
    screenshot(&client, backend, "dead-letters").await;
    client
        .find(Locator::Css("input[name='ids'][value='dead-2']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .find(Locator::Css("button[value='requeue']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "1 failed rows match: event dead-2").await;
    client
        .find(Locator::Css("button.danger"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    host.wait_status("dead-2", "delivered").await;
    client
        .goto(&format!("{base}/event?app=default&id=dead-2"))
        .await
        .unwrap();
    let main = text(&client).await;
    assert!(
        main.contains("delivered") && main.contains("sink log"),
        "{main}"
    );
    screenshot(&client, backend, "event").await;

    // The markup event type is text on its page, and no script of it ran.
    client
        .goto(&format!("{base}/event?app=default&id=xss-1"))
        .await
        .unwrap();
    assert!(text(&client).await.contains(XSS_TYPE));
    let ran = client
        .execute("return window.__xss === undefined ? 0 : 1", vec![])
        .await
        .unwrap();
    assert_eq!(ran, serde_json::json!(0), "the event type ran as a script");

    // The failed list filtered to the markup type lists xss-1 alone, its type and room as
    // literal text: no element in their cells, no script in the page's main part. (Opened by its
    // address: right after a form's submit, the page read may still be the unfiltered one.)
    let filtered = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("app", "default")
        .append_pair("type", XSS_TYPE)
        .finish();
    client
        .goto(&format!("{base}/dead?{filtered}"))
        .await
        .unwrap();
    let row = listed_row(&client, "xss-1").await;
    assert_eq!(
        row,
        serde_json::json!({
            "rows": 1,
            "type": { "text": XSS_TYPE, "elements": 0 },
            "room": { "text": XSS_ROOM, "elements": 0 },
            "scripts": 0,
        }),
        "the markup type and room are shown as text"
    );
    screenshot(&client, backend, "dead-letters-markup").await;

    // Pause the sink: a new event waits retryable without an attempt; resume: delivered.
    client.goto(&format!("{base}/sinks")).await.unwrap();
    let main = text(&client).await;
    assert!(
        main.contains("config.format") && main.contains("breaker.cool_down"),
        "{main}"
    );
    client
        .find(Locator::Css("button[value='Pause']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "sink log paused").await;
    host.store
        .enqueue(&[typed_record(
            "default",
            "browser-paused",
            "room-4",
            "RoomGiftSent",
            outboxd::record::now_ms(),
        )])
        .await
        .unwrap();
    host.wait_status("browser-paused", "retryable").await;
    assert_eq!(
        host.db
            .row("default", "browser-paused")
            .await
            .unwrap()
            .retry_count,
        0
    );
    screenshot(&client, backend, "sinks-paused").await;
    client
        .find(Locator::Css("button[value='Resume']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "sink log resumed").await;
    host.wait_status("browser-paused", "delivered").await;

    client
        .goto(&format!("{base}/events?status=delivered"))
        .await
        .unwrap();
    assert!(text(&client).await.contains("browser-paused"));
    screenshot(&client, backend, "events").await;
    client.close().await.unwrap();
    host.stop().await;
}
