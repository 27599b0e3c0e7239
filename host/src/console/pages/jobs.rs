//! A requeue or purge in progress (refreshing until done), and the latest ones.

use super::super::access::Caller;
use super::super::jobs::Job;
use super::layout::{page, time};

/// The page: job `job` (when asked for) and the latest.
pub(crate) fn render(job: Option<Job>, latest: &[Job], caller: &Caller) -> String {
    let live = job.as_ref().is_some_and(|j| !j.finished);
    page("Jobs", Some(caller), live, |h| {
        if let Some(job) = &job {
            let state = match (&job.error, job.finished) {
                (Some(error), _) => format!("stopped: {error}"),
                (None, true) => "done".into(),
                (None, false) => "running".into(),
            };
            h.el(
                "p",
                &[("class", "job"), ("id", "job")],
                &format!(
                    "{} #{}: {} of {} rows, {state} ({}).",
                    job.action, job.id, job.done, job.expected, job.target
                ),
            );
        }
        h.open("table", &[("class", "rows")]).open("tr", &[]);
        for name in ["job", "action", "what", "who", "rows", "started", "state"] {
            h.el("th", &[], name);
        }
        h.close("tr");
        for job in latest {
            h.open("tr", &[]);
            h.open("td", &[]).num(job.id).close("td");
            h.el("td", &[], &job.action)
                .el("td", &[], &job.target)
                .el("td", &[], &job.who);
            h.el(
                "td",
                &[("class", "num")],
                &format!("{} / {}", job.done, job.expected),
            );
            h.el("td", &[("class", "time")], &time(job.started_at_ms));
            h.el(
                "td",
                &[],
                if job.finished {
                    job.error.as_deref().unwrap_or("done")
                } else {
                    "running"
                },
            );
            h.close("tr");
        }
        h.close("table");
    })
}
