//! The overview: the shared table's rows per tenant and status, and this host's last hour
//! (delivered/failed per second as a chart, commit → delivered latency, each sink's state).

use maud::{Markup, html};

use super::super::access::Caller;
use super::super::data::{Overview, SinkState};
use super::layout::{age, heads, millis, page, time};
use crate::metrics::{PartitionView, RatePoint};
use crate::record::now_ms;

const COUNTS: [&str; 7] = [
    "app code",
    "pending",
    "delivering",
    "retryable",
    "failed",
    "delivered",
    "oldest pending",
];

const SINK_COLUMNS: [&str; 10] = [
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
];

/// The page.
pub(crate) fn render(view: &Overview, caller: &Caller) -> String {
    let counted = match view.refreshed_at_ms {
        Some(at) => format!(
            "Counted {} ago ([admin] refresh_interval).",
            age(now_ms() - at)
        ),
        None => "Not counted yet.".into(),
    };
    let (delivered, failed) = view.hour_totals;
    let latencies = [
        ("last 5 minutes", &view.latency_recent),
        ("last hour", &view.latency_hour),
    ];
    let main = html! {
        p.note { "Host " (view.node_id) " on " (view.database) ". " }
        h2 { "Shared table (every host's rows)" }
        p.note { (counted) }
        table.counts {
            (heads(&COUNTS))
            @for row in &view.table {
                @let c = &row.counts;
                tr {
                    td { (row.app_code) }
                    @for n in [c.pending, c.delivering, c.retryable, c.failed, c.delivered] {
                        td.num { (n) }
                    }
                    td { (c.oldest_pending_age_ms.map_or("-".into(), age)) }
                }
            }
        }
        h2 { "This host: the last hour" }
        p { (delivered) " delivered, " (failed) " failed in the last hour (per second, 10 s steps):" }
        (chart(&view.rates))
        table.counts {
            (heads(&["commit → delivered", "events", "p50", "p99"]))
            @for (label, q) in latencies {
                tr { td { (label) } td.num { (q.count) } td { (millis(q.p50_ms)) } td { (millis(q.p99_ms)) } }
            }
        }
        h2 { "This host's sinks (last 5 minutes)" }
        (sinks(&view.sinks))
        @if !view.partitions.is_empty() {
            h2 { "This host's partitions" }
            (partitions(&view.partitions))
        }
    };
    page("Overview", Some(caller), true, main)
}

/// This host's partitions per tenant: share, hosts, changes, and each owned partition's lag.
fn partitions(views: &[PartitionView]) -> Markup {
    html! {
        table.counts {
            (heads(&["app code", "owned", "share", "hosts", "taken", "released", "lost", "crash guard", "lag (partition: age of its oldest row)"]))
            @for view in views {
                tr {
                    td { (view.app_code) }
                    @for n in [view.owned as u64, u64::from(view.share), u64::from(view.hosts), view.taken, view.released, view.lost, view.guarded] {
                        td.num { (n) }
                    }
                    td {
                        @for (partition, lag) in &view.lag_ms {
                            span.lag { (partition) ": " (age(*lag)) " " }
                        }
                    }
                }
            }
        }
    }
}

/// The sinks' state table (also on the Sinks page).
pub(crate) fn sinks(sinks: &[SinkState]) -> Markup {
    html! {
        table.counts {
            (heads(&SINK_COLUMNS))
            @for sink in sinks {
                @let r = &sink.recent;
                tr {
                    td { (sink.name) }
                    @if let (Some(by), Some(since)) = (&sink.paused_by, sink.paused_since_ms) {
                        td.paused { "paused by " (by) " at " (time(since)) }
                    } @else {
                        td { "running" }
                    }
                    td class=(sink.breaker) { (sink.breaker) }
                    td.num { (r.publish.count) }
                    td { (millis(r.publish.p50_ms)) }
                    td { (millis(r.publish.p99_ms)) }
                    td.num { (r.answers.delivered) }
                    td.num { (r.answers.retryable + r.answers.permanent) }
                    td { (r.error_rate.map_or("-".into(), |e| format!("{:.1} %", e * 100.0))) }
                    td.num { (r.answers.deferred) }
                }
            }
        }
    }
}

/// Delivered (and failed) per second as an inline SVG, oldest left.
fn chart(rates: &[RatePoint]) -> Markup {
    const W: f64 = 720.0;
    const H: f64 = 120.0;
    let top = rates
        .iter()
        .map(|r| r.delivered_per_second.max(r.failed_per_second))
        .fold(0.0f64, f64::max)
        .max(1.0);
    let line = |value: fn(&RatePoint) -> f64| -> String {
        let step = W / (rates.len().max(2) - 1) as f64;
        let point = |(i, r)| {
            format!(
                "{:.1},{:.1}",
                i as f64 * step,
                H - value(r) / top * (H - 4.0)
            )
        };
        rates
            .iter()
            .enumerate()
            .map(point)
            .collect::<Vec<_>>()
            .join(" ")
    };
    html! {
        svg.chart viewBox="0 0 720 120" role="img" aria-label="delivered and failed per second, last hour" {
            polyline.delivered points=(line(|r| r.delivered_per_second)) {}
            polyline.failed points=(line(|r| r.failed_per_second)) {}
        }
        p.legend { (format!("peak {top:.1}/s · green: delivered · red: failed · left: an hour ago, right: now")) }
    }
}

#[cfg(test)]
mod tests {
    use super::partitions;
    use crate::metrics::PartitionView;

    #[test]
    fn the_partitions_table_shows_each_tenant_and_each_partitions_lag() {
        let view = PartitionView {
            app_code: "live".into(),
            owned: 2,
            share: 32,
            hosts: 2,
            taken: 34,
            released: 2,
            lost: 1,
            guarded: 5,
            lag_ms: [(3, 0), (17, 90_000)].into_iter().collect(),
        };
        let html = partitions(&[view]).into_string();
        let cells: Vec<&str> = html
            .split("<td class=\"num\">")
            .skip(1)
            .map(|cell| cell.split('<').next().unwrap())
            .collect();
        assert_eq!(cells, ["2", "32", "2", "34", "2", "1", "5"]);
        assert!(html.contains("<td>live</td>"), "{html}");
        assert!(html.contains("3: ") && html.contains("17: "), "{html}");
    }
}
