//! Physical time, injectable: the node reads the wall clock only through
//! [`WallClock`], so tests can run a node whose clock jumps backwards.

use std::time::{SystemTime, UNIX_EPOCH};

/// A source of physical time in Unix milliseconds.
pub trait WallClock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A fixed clock, for tests.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub u64);

impl WallClock for FixedClock {
    fn now_ms(&self) -> u64 {
        self.0
    }
}
