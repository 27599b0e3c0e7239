//! A requeue or purge in progress (refreshing until done), and the latest ones.

use maud::html;

use super::super::access::Caller;
use super::super::jobs::Job;
use super::layout::{heads, page, time};

/// The page: job `job` (when asked for) and the latest.
pub(crate) fn render(job: Option<Job>, latest: &[Job], caller: &Caller) -> String {
    let live = job.as_ref().is_some_and(|j| !j.finished);
    let state = |job: &Job| match (&job.error, job.finished) {
        (Some(error), _) => format!("stopped: {error}"),
        (None, true) => "done".into(),
        (None, false) => "running".into(),
    };
    let main = html! {
        @if let Some(job) = &job {
            p.job id="job" {
                (format!("{} #{}: {} of {} rows, {} ({}).", job.action, job.id, job.done, job.expected, state(job), job.target))
            }
        }
        table.rows {
            (heads(&["job", "action", "what", "who", "rows", "started", "state"]))
            @for job in latest {
                tr {
                    td { (job.id) }
                    td { (job.action) }
                    td { (job.target) }
                    td { (job.who) }
                    td.num { (job.done) " / " (job.expected) }
                    td.time { (time(job.started_at_ms)) }
                    td { (if job.finished { job.error.as_deref().unwrap_or("done") } else { "running" }) }
                }
            }
        }
    };
    page("Jobs", Some(caller), live, main)
}
