//! Figures shared by the bench sections: latency percentiles and the
//! process's peak memory.

use serde::Serialize;

/// Percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Millis {
    pub p50: f64,
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

/// Peak resident set size of this process (Linux `VmHWM`), 0 elsewhere.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
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
}
