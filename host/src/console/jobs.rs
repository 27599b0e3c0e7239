//! Dead-letter actions running in the background: one [`Job`] per requeue or purge of a filter
//! or selection, its progress readable while it runs (the job page and `/api/jobs/ID`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// Most finished jobs remembered.
const KEPT: usize = 50;

/// One action's progress.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Job {
    /// Its number, from 1.
    pub id: u64,
    /// `requeue` or `purge`.
    pub action: String,
    /// What it acts on, in words.
    pub target: String,
    /// Who asked.
    pub who: String,
    /// Rows the dry run counted.
    pub expected: u64,
    /// Rows done so far.
    pub done: u64,
    /// Finished (with `error` when it failed).
    pub finished: bool,
    /// Why it stopped early.
    pub error: Option<String>,
    /// When it started, UTC ms.
    pub started_at_ms: i64,
}

/// Every job of this console.
#[derive(Debug, Default)]
pub struct Jobs {
    jobs: Mutex<BTreeMap<u64, Job>>,
}

impl Jobs {
    /// Registers a job; returns its id.
    pub fn start(&self, mut job: Job) -> u64 {
        let Ok(mut jobs) = self.jobs.lock() else {
            return 0;
        };
        let id = jobs.keys().next_back().copied().unwrap_or(0) + 1;
        job.id = id;
        jobs.insert(id, job);
        while jobs.len() > KEPT {
            let Some(oldest) = jobs.iter().find(|(_, j)| j.finished).map(|(k, _)| *k) else {
                break;
            };
            jobs.remove(&oldest);
        }
        id
    }

    /// Adds `rows` to job `id`'s progress.
    pub fn progress(&self, id: u64, rows: u64) {
        if let Ok(mut jobs) = self.jobs.lock()
            && let Some(job) = jobs.get_mut(&id)
        {
            job.done += rows;
        }
    }

    /// Marks job `id` finished.
    pub fn finish(&self, id: u64, error: Option<String>) {
        if let Ok(mut jobs) = self.jobs.lock()
            && let Some(job) = jobs.get_mut(&id)
        {
            job.finished = true;
            job.error = error;
        }
    }

    /// Job `id`.
    pub fn get(&self, id: u64) -> Option<Job> {
        self.jobs.lock().ok()?.get(&id).cloned()
    }

    /// The latest jobs, newest first.
    pub fn latest(&self, n: usize) -> Vec<Job> {
        self.jobs
            .lock()
            .map(|jobs| jobs.values().rev().take(n).cloned().collect())
            .unwrap_or_default()
    }
}
