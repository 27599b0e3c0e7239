//! Timed samples and their percentiles (nearest rank), as every bench report prints them.

use std::time::Duration;

/// Durations measured by a run, kept sorted ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Samples(Vec<Duration>);

impl Samples {
    /// `durations` sorted.
    pub fn new(mut durations: Vec<Duration>) -> Samples {
        durations.sort_unstable();
        Samples(durations)
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `p`-th percentile (0–100) by nearest rank; zero without samples.
    pub fn percentile(&self, p: f64) -> Duration {
        nearest_rank(&self.0, p)
    }

    /// The `p`-th percentile in milliseconds.
    pub fn ms(&self, p: f64) -> f64 {
        ms(self.percentile(p))
    }

    /// The `n`-th largest sample (0: the largest); zero when there are not that many.
    pub fn largest(&self, n: usize) -> Duration {
        self.0.iter().rev().nth(n).copied().unwrap_or_default()
    }
}

impl FromIterator<Duration> for Samples {
    fn from_iter<I: IntoIterator<Item = Duration>>(iter: I) -> Samples {
        Samples::new(iter.into_iter().collect())
    }
}

/// The `p`-th percentile (0–100) of ascending `sorted` (nearest rank); zero when empty.
pub fn nearest_rank(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank_of_unsorted_input() {
        let samples: Samples = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(samples.percentile(50.0), Duration::from_millis(50));
        assert_eq!(samples.percentile(99.0), Duration::from_millis(99));
        assert_eq!(samples.percentile(100.0), Duration::from_millis(100));
        assert_eq!(samples.percentile(0.0), Duration::from_millis(1));
        assert_eq!(samples.largest(1), Duration::from_millis(99));
        assert_eq!(samples.ms(50.0), 50.0);
        assert_eq!(Samples::default().percentile(50.0), Duration::ZERO);
        assert_eq!(Samples::default().largest(0), Duration::ZERO);
    }
}
