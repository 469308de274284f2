//! Progress on stderr (indicatif) for the long operations: bundle export and
//! import, index rebuild, `amos bench`, and the first sync (`amos sync now`,
//! `amos join`, through [`SyncProgress`], a [`SyncObserver`] the mesh tells).
//!
//! A line is drawn only when the caller allows it ([`Feedback::Auto`]) and
//! stderr is a terminal; otherwise it is hidden and costs an atomic add per
//! update. Every line is cleared when dropped, so the command's own output
//! follows on a clean terminal.
//!
//! Must never write to stdout, and never draw on a stderr that is not a
//! terminal: piped output and logs get no carriage returns or escape
//! sequences.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use amos_protocol::NodeId;
use amos_sync::ApplyReport;

use crate::events::{Observer, SyncObserver};

/// Whether a command may draw progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Feedback {
    /// Draw when stderr is a terminal.
    #[default]
    Auto,
    /// Never draw (`-q`, `--json`).
    Quiet,
}

impl Feedback {
    /// Whether a line would be drawn now.
    pub fn draws(self) -> bool {
        self == Feedback::Auto && std::io::stderr().is_terminal()
    }
}

/// One progress line on stderr; cleared when dropped.
#[derive(Debug)]
pub struct Progress(indicatif::ProgressBar);

impl Progress {
    /// A line that is never drawn.
    pub fn hidden() -> Progress {
        Progress(indicatif::ProgressBar::hidden())
    }

    /// A bar towards `len` `unit`s (0 until [`Progress::set_len`]), named
    /// `what`.
    pub fn bar(feedback: Feedback, what: &str, unit: &str, len: u64) -> Progress {
        Progress::styled(
            feedback,
            len,
            "{prefix:>8} [{wide_bar}] {human_pos}/{human_len} {msg}, eta {eta}",
            what,
            unit,
        )
    }

    /// A count of `unit`s with no known total.
    pub fn counter(feedback: Feedback, what: &str, unit: &str) -> Progress {
        Progress::styled(
            feedback,
            0,
            "{prefix:>8} {spinner} {human_pos} {msg}, {elapsed}",
            what,
            unit,
        )
    }

    /// A line of text ([`Progress::set_message`]) after a spinner, shown
    /// at once.
    pub fn status(feedback: Feedback, what: &str, first: &str) -> Progress {
        let p = Progress::styled(feedback, 0, "{prefix:>8} {spinner} {msg}", what, first);
        p.0.tick();
        p
    }

    /// Drawn on its first update (a bar waits for its length).
    fn styled(feedback: Feedback, len: u64, template: &str, prefix: &str, msg: &str) -> Progress {
        if !feedback.draws() {
            return Progress::hidden();
        }
        let mut bar = indicatif::ProgressBar::new(len);
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            bar = bar.with_style(style.progress_chars("=> "));
        }
        Progress(
            bar.with_prefix(prefix.to_owned())
                .with_message(msg.to_owned()),
        )
    }

    /// Count `n` more units done.
    pub fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    /// Set the total, once it is known.
    pub fn set_len(&self, len: u64) {
        self.0.set_length(len);
    }

    /// Replace the text after the bar.
    pub fn set_message(&self, msg: impl Into<Cow<'static, str>>) {
        self.0.set_message(msg);
    }

    /// Whether nothing is drawn (the caller may skip work it does only
    /// for the line).
    pub fn is_hidden(&self) -> bool {
        self.0.is_hidden()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// What a sync pass moved so far, over all its peers, as one line:
/// facts received, applied and sent.
#[derive(Debug)]
pub struct SyncProgress {
    line: Progress,
    received: AtomicU64,
    applied: AtomicU64,
    sent: AtomicU64,
}

impl SyncProgress {
    /// A line that starts as `connecting`; hidden unless `feedback` draws on a terminal.
    pub fn new(feedback: Feedback) -> Arc<SyncProgress> {
        Arc::new(SyncProgress {
            line: Progress::status(feedback, "sync", "connecting"),
            received: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            sent: AtomicU64::new(0),
        })
    }

    /// The observer to give the mesh; none when nothing is drawn.
    pub fn observer(self: &Arc<Self>) -> Option<Observer> {
        (!self.line.is_hidden()).then(|| self.clone() as Observer)
    }

    fn show(&self) {
        self.line.set_message(format!(
            "{} facts received, {} applied, {} sent",
            self.received.load(Ordering::Relaxed),
            self.applied.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed)
        ));
    }
}

impl SyncObserver for SyncProgress {
    fn applied(&self, _peer: &NodeId, facts: u64, report: &ApplyReport) {
        self.received.fetch_add(facts, Ordering::Relaxed);
        self.applied.fetch_add(report.applied, Ordering::Relaxed);
        self.show();
    }

    fn sent(&self, _peer: &NodeId, facts: u64) {
        self.sent.fetch_add(facts, Ordering::Relaxed);
        self.show();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_never_draws_and_counts_still_add_up() {
        assert!(!Feedback::Quiet.draws());
        let p = Progress::bar(Feedback::Quiet, "x", "facts", 10);
        assert!(p.is_hidden());
        let s = SyncProgress::new(Feedback::Quiet);
        assert!(s.observer().is_none(), "nothing drawn, nothing observed");
        let peer = NodeId([7; 32]);
        let report = ApplyReport {
            applied: 2,
            ..ApplyReport::default()
        };
        s.applied(&peer, 3, &report);
        s.sent(&peer, 5);
        assert_eq!(s.received.load(Ordering::Relaxed), 3);
        assert_eq!(s.applied.load(Ordering::Relaxed), 2);
        assert_eq!(s.sent.load(Ordering::Relaxed), 5);
    }
}
