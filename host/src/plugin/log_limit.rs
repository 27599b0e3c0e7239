//! A sink's cap on what its plugin writes to the host log (stdout, stderr and the `logging`
//! import together): at most `limits.log_lines_per_second` lines (a token bucket, burst = the
//! rate), each cut to `limits.log_line_max` bytes; lines over the rate are dropped and counted,
//! and the count is logged as one "N plugin log lines suppressed" line when the next line gets
//! through, at the end of each publish call, and at least every [`REPORT_EVERY`].

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest wait between two "lines suppressed" reports while a plugin keeps flooding.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The per-sink line budget, shared by all the sink's instances.
#[derive(Debug)]
pub struct LogLimit {
    sink: std::sync::Arc<str>,
    rate: f64,
    max_line: usize,
    state: Mutex<Budget>,
}

#[derive(Debug)]
struct Budget {
    tokens: f64,
    at: Instant,
    suppressed: u64,
    last_report: Instant,
}

impl LogLimit {
    /// `lines_per_second` lines (at least 1) of at most `max_line` bytes (at least 16).
    pub fn new(sink: std::sync::Arc<str>, lines_per_second: u32, max_line: usize) -> LogLimit {
        let rate = f64::from(lines_per_second.max(1));
        let now = Instant::now();
        LogLimit {
            sink,
            rate,
            max_line: max_line.max(16),
            state: Mutex::new(Budget {
                tokens: rate,
                at: now,
                suppressed: 0,
                last_report: now,
            }),
        }
    }

    /// Longest line kept, in bytes.
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// Whether one more line may be logged now; a refused line is counted. Reports the count of
    /// suppressed lines first when a line gets through after some were dropped (or every
    /// [`REPORT_EVERY`] while they keep being dropped).
    pub fn admit(&self) -> bool {
        let mut budget = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let refill = now.duration_since(budget.at).as_secs_f64() * self.rate;
        budget.tokens = (budget.tokens + refill).min(self.rate);
        budget.at = now;
        let admitted = budget.tokens >= 1.0;
        if admitted {
            budget.tokens -= 1.0;
        } else {
            budget.suppressed += 1;
        }
        if budget.suppressed > 0
            && (admitted || now.duration_since(budget.last_report) >= REPORT_EVERY)
        {
            self.report(&mut budget, now);
        }
        admitted
    }

    /// Logs the count of lines suppressed since the last report, if any (called after every
    /// publish call, so a flood is always accounted for).
    pub fn flush(&self) {
        let mut budget = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if budget.suppressed > 0 {
            self.report(&mut budget, Instant::now());
        }
    }

    fn report(&self, budget: &mut Budget, now: Instant) {
        tracing::warn!(target: "outboxd::plugin", sink = %self.sink, suppressed = budget.suppressed,
            "{} plugin log lines suppressed (limits.log_lines_per_second = {})",
            budget.suppressed, self.rate);
        budget.suppressed = 0;
        budget.last_report = now;
    }

    /// `line` cut to the byte limit at a character boundary, marked when cut.
    pub fn cut<'a>(&self, line: &'a str) -> std::borrow::Cow<'a, str> {
        if line.len() <= self.max_line {
            return line.into();
        }
        let mut end = self.max_line;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}… [{} bytes cut]", &line[..end], line.len() - end).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_over_the_rate_are_counted_and_cut_lines_marked() {
        let limit = LogLimit::new("s".into(), 5, 32);
        let admitted = (0..50).filter(|_| limit.admit()).count();
        assert!((5..=6).contains(&admitted), "{admitted}");
        assert!(limit.state.lock().unwrap().suppressed >= 44);
        limit.flush();
        assert_eq!(limit.state.lock().unwrap().suppressed, 0);
        assert_eq!(limit.cut("short"), "short");
        let long = "é".repeat(40);
        let cut = limit.cut(&long);
        assert!(
            cut.starts_with(&"é".repeat(16)) && cut.ends_with("[48 bytes cut]"),
            "{cut}"
        );
    }
}
