//! The CPU a drain cost: the machine's (every process: the database, a broker, this benchmark)
//! and this process's own (outboxd's worker and its plugins, or the raw loop), read from
//! `/proc/stat` and `/proc/self/stat` around the drain. Per event, they tell where the time went
//! when a drain is bound by the machine's cores: a sink whose drain costs the machine twice the
//! CPU per event of the no-sink drain cannot reach more than half its rate once the cores are
//! busy. Linux only; elsewhere nothing is measured.

use std::time::{Duration, Instant};

/// The shortest stretch whose CPU is reported: `/proc` counts in clock ticks (10 ms), so a
/// shorter one's figures would be mostly rounding.
pub const LEAST_WALL: Duration = Duration::from_millis(200);

/// The CPU counters at one moment.
#[derive(Debug, Clone, Copy)]
pub struct CpuMark {
    at: Instant,
    /// Every core's busy ticks (all but idle and iowait), summed.
    machine_busy: u64,
    /// This process's user and system ticks.
    own: u64,
}

/// What a stretch of time cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSpent {
    /// CPU seconds the whole machine was busy.
    pub machine: f64,
    /// CPU seconds of this process.
    pub own: f64,
    /// Wall time.
    pub wall: Duration,
}

impl CpuSpent {
    /// Cores busy on average over the stretch.
    pub fn busy_cores(&self) -> f64 {
        self.machine / self.wall.as_secs_f64().max(1e-9)
    }
}

impl CpuMark {
    /// The counters now, or `None` where `/proc` cannot be read.
    pub fn now() -> Option<CpuMark> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let machine_busy = machine_busy_ticks(&stat)?;
        let own = own_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        Some(CpuMark {
            at: Instant::now(),
            machine_busy,
            own,
        })
    }

    /// What was spent since `self`; `None` when `/proc` cannot be read or less than
    /// [`LEAST_WALL`] passed.
    pub fn spent(&self) -> Option<CpuSpent> {
        let now = CpuMark::now()?;
        if now.at - self.at < LEAST_WALL {
            return None;
        }
        let hz = ticks_per_second();
        Some(CpuSpent {
            machine: now.machine_busy.saturating_sub(self.machine_busy) as f64 / hz,
            own: now.own.saturating_sub(self.own) as f64 / hz,
            wall: now.at - self.at,
        })
    }
}

/// The clock ticks per second of `/proc`'s counters.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant of the system and touches no memory of ours.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// The busy ticks of `/proc/stat`'s `cpu` line: user, nice, system, irq, softirq, steal (not
/// idle, not iowait).
fn machine_busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    Some(field(0) + field(1) + field(2) + field(5) + field(6) + field(7))
}

/// utime + stime of a `/proc/<pid>/stat` line (fields 14 and 15; the command name, field 2, is
/// in parentheses and may hold spaces).
fn own_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_busy_ticks_of_the_machine_and_the_process() {
        let stat = "cpu  100 5 50 1000 30 7 3 2 0 0\ncpu0 50 2 25 500 15 3 1 1 0 0\n";
        assert_eq!(machine_busy_ticks(stat), Some(100 + 5 + 50 + 7 + 3 + 2));
        let own = "4242 (outboxd bench) S 1 4242 4242 0 -1 4194560 900 0 0 0 31 12 0 0 20 0 9";
        assert_eq!(own_ticks(own), Some(31 + 12));
        assert_eq!(own_ticks("garbled"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_busy_loop_is_counted_on_this_process() {
        // Spins until this process has used 0.2 s of CPU (however busy the machine is with
        // other tests), and at least 0.3 s of wall time; a counter that does not move fails at
        // the deadline.
        let mark = CpuMark::now().expect("/proc is readable");
        let want = (0.2 * ticks_per_second()) as u64;
        let started = Instant::now();
        let mut x = 0u64;
        while CpuMark::now().unwrap().own - mark.own < want
            || started.elapsed() < Duration::from_millis(300)
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no CPU counted"
            );
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        let spent = mark.spent().expect("/proc is readable, and 0.3 s passed");
        assert!(spent.own >= 0.2, "own CPU {:.3} s", spent.own);
        assert!(spent.machine >= spent.own * 0.5, "{spent:?}");
        assert!(
            CpuMark::now().unwrap().spent().is_none(),
            "a stretch too short to count"
        );
    }
}
