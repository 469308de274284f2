//! Figures shared by the bench sections: latency percentiles, the
//! process's peak memory and the machine a run measured.

use serde::Serialize;

/// Percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Millis {
    /// The median.
    pub p50: f64,
    /// The 99th percentile.
    pub p99: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// The median and 99th percentile of `xs` (milliseconds); 0 when empty.
pub(crate) fn millis(mut xs: Vec<f64>) -> Millis {
    xs.sort_by(f64::total_cmp);
    Millis {
        p50: percentile(&xs, 0.5),
        p99: percentile(&xs, 0.99),
    }
}

/// Peak resident set size of this process (Linux `VmHWM`: since start, or
/// since the last [`reset_peak_rss`]), 0 elsewhere.
pub fn peak_rss_bytes() -> u64 {
    status_bytes("VmHWM:")
}

/// Resident set size of this process now (Linux `VmRSS`), 0 elsewhere.
pub fn rss_bytes() -> u64 {
    status_bytes("VmRSS:")
}

fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Start a new peak: Linux resets `VmHWM` to the present RSS when "5" is
/// written to `/proc/self/clear_refs`. Elsewhere (or when refused) the peak
/// stays cumulative.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// One bench phase's memory: its peak and what stayed resident after it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PhaseMemory {
    /// Peak resident bytes during the phase.
    pub peak_bytes: u64,
    /// Resident bytes when it ended.
    pub after_bytes: u64,
}

impl PhaseMemory {
    /// The phase that just ended; the next one starts its own peak.
    pub fn end_phase() -> PhaseMemory {
        let m = PhaseMemory {
            peak_bytes: peak_rss_bytes(),
            after_bytes: rss_bytes(),
        };
        reset_peak_rss();
        m
    }
}

/// The machine a run measured, so that runs on different machines are not
/// read as one: figures move more between machines than between builds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    /// The CPU's model name (Linux `/proc/cpuinfo`), null elsewhere.
    pub cpu: Option<String>,
    /// The cores this process may use.
    pub cores: usize,
    /// The one-minute load average when the run began (Linux
    /// `/proc/loadavg`), null elsewhere: a busy machine's figures are not
    /// a quiet one's.
    pub load_before: Option<f64>,
    /// The amos version that ran.
    pub amos: &'static str,
}

impl Machine {
    /// This machine, now.
    pub fn now() -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        Machine {
            cpu: read("/proc/cpuinfo").and_then(|s| cpu_model(&s)),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load_before: read("/proc/loadavg").and_then(|s| load_1m(&s)),
            amos: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// The first `model name` of a `/proc/cpuinfo`.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(key, _)| key.trim() == "model name")
        .map(|(_, value)| value.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The one-minute load average of a `/proc/loadavg`.
fn load_1m(loadavg: &str) -> Option<f64> {
    loadavg.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_list() {
        let m = millis((1..=100).rev().map(f64::from).collect());
        assert_eq!(m.p50, 51.0);
        assert_eq!(m.p99, 99.0);
        assert_eq!(millis(vec![]).p50, 0.0);
    }

    #[test]
    fn the_machine_is_read_from_cpuinfo_and_loadavg() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\n\
                       model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu\n\n\
                       processor\t: 1\nmodel name\t: Another\n";
        assert_eq!(
            cpu_model(cpuinfo).as_deref(),
            Some("Intel(R) Xeon(R) Processor")
        );
        assert_eq!(cpu_model("processor\t: 0\nmodel name\t:\n"), None);
        assert_eq!(cpu_model(""), None);
        assert_eq!(load_1m("0.53 0.73 0.57 1/234 5678\n"), Some(0.53));
        assert_eq!(load_1m("busy"), None);
        assert!(Machine::now().cores >= 1);
    }
}
