//! Retry policy: when a failed delivery is tried again, or given up.
//!
//! Strategies: `fixed_interval`, `exponential` (base · 2^(n−1) capped, full jitter) and
//! `schedule` (an explicit list of delays, the last one repeating). After `max_attempts` attempts
//! the row goes to `failed`. A retry-after the sink sends back wins over the strategy.

use std::time::Duration;

use rand::Rng;

use crate::store::Disposition;

/// How long to wait before the next attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// The same delay after every failure (the Go version's only strategy).
    FixedInterval {
        /// The delay.
        interval: Duration,
    },
    /// Full-jitter exponential backoff: a random delay in `[0, min(cap, base · 2^(n−1))]`.
    Exponential {
        /// Delay ceiling of the first retry.
        base: Duration,
        /// Largest delay.
        cap: Duration,
    },
    /// Explicit delays: the n-th failure waits `delays[n−1]`, the last one repeating.
    Schedule {
        /// The delays; never empty.
        delays: Vec<Duration>,
    },
}

/// A strategy plus the attempt limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay strategy.
    pub strategy: Strategy,
    /// Attempts allowed in all (the first delivery counts); at least 1.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            strategy: Strategy::Exponential {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(600),
            },
            max_attempts: 20,
        }
    }
}

impl RetryPolicy {
    /// The row's new state after failed attempt number `attempt` (1-based), which failed with
    /// `error`, at `now_ms`: `retryable` after the strategy's delay (`retry_after` from the sink,
    /// when given, replaces it), or `failed` once `max_attempts` attempts are spent (the error
    /// then says so).
    pub fn after_failure(
        &self,
        attempt: u32,
        error: String,
        retry_after: Option<Duration>,
        now_ms: i64,
    ) -> Disposition {
        if attempt >= self.max_attempts {
            return Disposition::Failed {
                error: format!("gave up after {attempt} attempts: {error}"),
            };
        }
        let delay = retry_after.unwrap_or_else(|| self.delay(attempt));
        let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        Disposition::Retryable {
            next_retry_at_ms: now_ms.saturating_add(delay_ms),
            error,
        }
    }

    /// The strategy's delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        match &self.strategy {
            Strategy::FixedInterval { interval } => *interval,
            Strategy::Exponential { base, cap } => {
                let exponent = attempt.saturating_sub(1).min(62);
                let ceiling = base.saturating_mul(1u32 << exponent.min(31)).min(*cap);
                let ceiling = if exponent > 31 { *cap } else { ceiling };
                let ceiling_ms = ceiling.as_millis() as u64;
                Duration::from_millis(rand::rng().random_range(0..=ceiling_ms))
            }
            Strategy::Schedule { delays } => {
                let index = (attempt.max(1) as usize - 1).min(delays.len().saturating_sub(1));
                delays.get(index).copied().unwrap_or_default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry_at(next_retry_at_ms: i64) -> Disposition {
        Disposition::Retryable {
            next_retry_at_ms,
            error: "e".into(),
        }
    }

    fn policy(strategy: Strategy) -> RetryPolicy {
        RetryPolicy {
            strategy,
            max_attempts: 5,
        }
    }

    #[test]
    fn fixed_interval_adds_interval() {
        let p = policy(Strategy::FixedInterval {
            interval: Duration::from_secs(2),
        });
        assert_eq!(p.after_failure(1, "e".into(), None, 1_000), retry_at(3_000));
        assert_eq!(p.after_failure(4, "e".into(), None, 1_000), retry_at(3_000));
    }

    #[test]
    fn gives_up_at_max_attempts() {
        let p = policy(Strategy::FixedInterval {
            interval: Duration::from_secs(2),
        });
        let gave_up = |attempts: u32| Disposition::Failed {
            error: format!("gave up after {attempts} attempts: e"),
        };
        assert_eq!(p.after_failure(5, "e".into(), None, 0), gave_up(5));
        assert_eq!(
            p.after_failure(9, "e".into(), Some(Duration::from_secs(1)), 0),
            gave_up(9)
        );
    }

    #[test]
    fn retry_after_wins() {
        let p = policy(Strategy::FixedInterval {
            interval: Duration::from_secs(2),
        });
        assert_eq!(
            p.after_failure(1, "e".into(), Some(Duration::from_millis(250)), 1_000),
            retry_at(1_250)
        );
    }

    #[test]
    fn exponential_is_jittered_below_capped_ceiling() {
        let p = policy(Strategy::Exponential {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(1_000),
        });
        let mut seen_distinct = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let d1 = p.delay(1);
            assert!(d1 <= Duration::from_millis(100));
            let d3 = p.delay(3);
            assert!(d3 <= Duration::from_millis(400));
            let d40 = p.delay(40);
            assert!(d40 <= Duration::from_millis(1_000));
            seen_distinct.insert(d3);
        }
        assert!(seen_distinct.len() > 10, "no jitter: {seen_distinct:?}");
    }

    #[test]
    fn exponential_ceiling_grows() {
        let p = policy(Strategy::Exponential {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(3600),
        });
        let max_of = |attempt| (0..300).map(|_| p.delay(attempt)).max().unwrap();
        assert!(
            max_of(6) > Duration::from_millis(1_600),
            "ceiling 3.2s never approached"
        );
    }

    #[test]
    fn schedule_repeats_last() {
        let p = policy(Strategy::Schedule {
            delays: vec![
                Duration::from_secs(1),
                Duration::from_secs(5),
                Duration::from_secs(30),
            ],
        });
        assert_eq!(p.delay(1), Duration::from_secs(1));
        assert_eq!(p.delay(2), Duration::from_secs(5));
        assert_eq!(p.delay(3), Duration::from_secs(30));
        assert_eq!(p.delay(4), Duration::from_secs(30));
    }
}
