//! Virtual time: a queue of events ordered by when they happen (µs), ties
//! broken by the order they were scheduled — so a run is a function of its
//! seed and nothing else.
//!
//! Owns the queue and "now"; never reads a real clock.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Virtual microseconds since the simulation began.
pub type Micros = u64;

pub const MS: Micros = 1_000;
pub const SECOND: Micros = 1_000_000;

#[derive(Debug)]
struct Entry<E> {
    at: Micros,
    n: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.n) == (o.at, o.n)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.n).cmp(&(o.at, o.n))
    }
}

/// The event queue and the current virtual time.
#[derive(Debug)]
pub struct Clock<E> {
    now: Micros,
    next_n: u64,
    queue: BinaryHeap<Reverse<Entry<E>>>,
}

impl<E> Default for Clock<E> {
    fn default() -> Self {
        Clock {
            now: 0,
            next_n: 0,
            queue: BinaryHeap::new(),
        }
    }
}

impl<E> Clock<E> {
    pub fn now(&self) -> Micros {
        self.now
    }

    /// Schedule `event` at `at` (never before now).
    pub fn at(&mut self, at: Micros, event: E) {
        let n = self.next_n;
        self.next_n += 1;
        self.queue.push(Reverse(Entry {
            at: at.max(self.now),
            n,
            event,
        }));
    }

    /// Schedule `event` `after` from now.
    pub fn after(&mut self, after: Micros, event: E) {
        self.at(self.now.saturating_add(after), event);
    }

    /// When the next event is due.
    pub fn next_due(&self) -> Option<Micros> {
        self.queue.peek().map(|Reverse(e)| e.at)
    }

    /// Take the next event due at or before `until`, moving now to it.
    pub fn pop_until(&mut self, until: Micros) -> Option<E> {
        if self.next_due()? > until {
            return None;
        }
        let Reverse(e) = self.queue.pop()?;
        self.now = e.at;
        Some(e.event)
    }

    /// Move now forward to `t` (after the events before it ran).
    pub fn advance_to(&mut self, t: Micros) {
        self.now = self.now.max(t);
    }

    pub fn is_idle(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_in_time_order_ties_in_schedule_order() {
        let mut c = Clock::default();
        c.at(30, "c");
        c.at(10, "a");
        c.at(10, "b");
        c.at(50, "late");
        let mut got = Vec::new();
        while let Some(e) = c.pop_until(40) {
            got.push((c.now(), e));
        }
        assert_eq!(got, vec![(10, "a"), (10, "b"), (30, "c")]);
        c.advance_to(40);
        assert_eq!(c.now(), 40);
        c.at(0, "past");
        assert_eq!(c.pop_until(40), Some("past"), "never before now");
        assert_eq!(c.now(), 40);
    }
}
