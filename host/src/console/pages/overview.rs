//! The overview: the shared table's rows per tenant and status, and this host's last hour
//! (delivered/failed per second as a chart, commit → delivered latency, each sink's state).

use super::super::access::Caller;
use super::super::data::{Overview, SinkState};
use super::super::html::Html;
use super::layout::{age, millis, page, time};
use crate::metrics::RatePoint;
use crate::record::now_ms;

/// The page.
pub(crate) fn render(view: &Overview, caller: &Caller) -> String {
    page("Overview", Some(caller), true, |h| {
        h.open("p", &[("class", "note")])
            .text(&format!("Host {} on {}. ", view.node_id, view.database))
            .close("p");
        h.el("h2", &[], "Shared table (every host's rows)");
        h.open("p", &[("class", "note")])
            .text(&match view.refreshed_at_ms {
                Some(at) => format!(
                    "Counted {} ago ([admin] refresh_interval).",
                    age(now_ms() - at)
                ),
                None => "Not counted yet.".into(),
            })
            .close("p");
        h.open("table", &[("class", "counts")]).open("tr", &[]);
        for name in [
            "app code",
            "pending",
            "delivering",
            "retryable",
            "failed",
            "delivered",
            "oldest pending",
        ] {
            h.el("th", &[], name);
        }
        h.close("tr");
        for row in &view.table {
            let c = &row.counts;
            h.open("tr", &[]).el("td", &[], &row.app_code);
            for n in [c.pending, c.delivering, c.retryable, c.failed, c.delivered] {
                h.open("td", &[("class", "num")]).num(n).close("td");
            }
            h.el("td", &[], &c.oldest_pending_age_ms.map_or("-".into(), age));
            h.close("tr");
        }
        h.close("table");

        h.el("h2", &[], "This host: the last hour");
        let (delivered, failed) = view.hour_totals;
        h.el(
            "p",
            &[],
            &format!(
                "{delivered} delivered, {failed} failed in the last hour (per second, 10 s steps):"
            ),
        );
        chart(h, &view.rates);
        h.open("table", &[("class", "counts")]).open("tr", &[]);
        for name in ["commit → delivered", "events", "p50", "p99"] {
            h.el("th", &[], name);
        }
        h.close("tr");
        for (label, q) in [
            ("last 5 minutes", &view.latency_recent),
            ("last hour", &view.latency_hour),
        ] {
            h.open("tr", &[]).el("td", &[], label);
            h.open("td", &[("class", "num")]).num(q.count).close("td");
            h.el("td", &[], &millis(q.p50_ms))
                .el("td", &[], &millis(q.p99_ms));
            h.close("tr");
        }
        h.close("table");
        h.el("h2", &[], "This host's sinks (last 5 minutes)");
        sinks(h, &view.sinks);
    })
}

/// The sinks' state table (also on the Sinks page).
pub(crate) fn sinks(h: &mut Html, sinks: &[SinkState]) {
    h.open("table", &[("class", "counts")]).open("tr", &[]);
    for name in [
        "sink",
        "state",
        "breaker",
        "publishes",
        "publish p50",
        "publish p99",
        "delivered",
        "errors",
        "error rate",
        "deferred",
    ] {
        h.el("th", &[], name);
    }
    h.close("tr");
    for sink in sinks {
        let r = &sink.recent;
        h.open("tr", &[]).el("td", &[], &sink.name);
        match (&sink.paused_by, sink.paused_since_ms) {
            (Some(by), Some(since)) => h.el(
                "td",
                &[("class", "paused")],
                &format!("paused by {by} at {}", time(since)),
            ),
            _ => h.el("td", &[], "running"),
        };
        h.el("td", &[("class", sink.breaker)], sink.breaker);
        h.open("td", &[("class", "num")])
            .num(r.publish.count)
            .close("td");
        h.el("td", &[], &millis(r.publish.p50_ms))
            .el("td", &[], &millis(r.publish.p99_ms));
        h.open("td", &[("class", "num")])
            .num(r.answers.delivered)
            .close("td");
        h.open("td", &[("class", "num")])
            .num(r.answers.retryable + r.answers.permanent)
            .close("td");
        h.el(
            "td",
            &[],
            &r.error_rate
                .map_or("-".into(), |e| format!("{:.1} %", e * 100.0)),
        );
        h.open("td", &[("class", "num")])
            .num(r.answers.deferred)
            .close("td");
        h.close("tr");
    }
    h.close("table");
}

/// Delivered (and failed) per second as an inline SVG, oldest left.
fn chart(h: &mut Html, rates: &[RatePoint]) {
    const W: f64 = 720.0;
    const H: f64 = 120.0;
    let top = rates
        .iter()
        .map(|r| r.delivered_per_second.max(r.failed_per_second))
        .fold(0.0f64, f64::max)
        .max(1.0);
    let line = |value: fn(&RatePoint) -> f64| -> String {
        let step = W / (rates.len().max(2) - 1) as f64;
        rates
            .iter()
            .enumerate()
            .map(|(i, r)| {
                format!(
                    "{:.1},{:.1}",
                    i as f64 * step,
                    H - value(r) / top * (H - 4.0)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    h.open(
        "svg",
        &[
            ("class", "chart"),
            ("viewBox", "0 0 720 120"),
            ("role", "img"),
            ("aria-label", "delivered and failed per second, last hour"),
        ],
    );
    h.open(
        "polyline",
        &[
            ("class", "delivered"),
            ("points", &line(|r| r.delivered_per_second)),
        ],
    )
    .close("polyline");
    h.open(
        "polyline",
        &[
            ("class", "failed"),
            ("points", &line(|r| r.failed_per_second)),
        ],
    )
    .close("polyline");
    h.close("svg");
    h.el(
        "p",
        &[("class", "legend")],
        &format!(
            "peak {top:.1}/s · green: delivered · red: failed · left: an hour ago, right: now"
        ),
    );
}
