//! The text section of `amos bench`: concurrent edits of one 10 kB memory
//! on two in-process `full` peers, the cost of merging the other side's
//! edit, and what an edited memory stores before and after compaction.
//!
//! Boundary: drives the same node API as the CLI (`update_with`,
//! `apply_from`, export); reads nothing it could not read through it but
//! the byte counts of `store::text_log`.

use std::time::Instant;

use amos_acl::PeerPolicy;
use amos_protocol::{MemoryType, NodeId, SignedFact};
use serde::Serialize;

use super::stats::{Millis, millis};
use crate::api::memories::NewMemory;
use crate::api::node::Node;
use crate::error::Result;
use crate::home::Home;
use crate::store::replica::{self, ExportSpec};
use crate::store::text_log::stored_bytes;

/// What the text section reports.
#[derive(Debug, Serialize)]
pub struct TextReport {
    /// Bytes of the memory's text.
    pub text_bytes: usize,
    /// Rounds of two concurrent one-line edits.
    pub rounds: usize,
    /// Applying the other peer's edit (one fact) into a memory that has a
    /// concurrent edit of its own: gate, merge, materialise, write — in a
    /// process that holds the document already (`amos serve`, `amos mcp`).
    pub merge_ms: Millis,
    /// The same in a process that first loads the document from the store
    /// (a fresh `amos sync now`).
    pub merge_cold_ms: Millis,
    /// A local one-line edit (`amos update`), compaction included when due.
    pub edit_ms: Millis,
    /// Bytes of the facts that carried one one-line edit.
    pub edit_fact_bytes: u64,
    /// Both peers ended with byte-identical text holding every edit.
    pub converged: bool,
    /// Bytes an edited memory stores for its text before compaction, over
    /// its text: log facts (base and every edit) and the cached document.
    pub overhead_before: f64,
    /// The same after the origin compacted (snapshot, and the cache).
    pub overhead_after: f64,
    /// Of `overhead_after`: the log facts alone (what is kept and sent).
    pub overhead_after_log: f64,
}

fn text_of(node: &Node, id: &str) -> Result<String> {
    let who = node.requester("alice")?;
    Ok(node.get(&who, id)?.into_inner().content)
}

/// Every fact of `from` written after `since`, verified as a peer would.
fn facts_since(from: &Node, since: i64) -> Result<(Vec<amos_protocol::Verified<SignedFact>>, u64)> {
    let mut out = Vec::new();
    let mut bytes = 0u64;
    from.store.read(|r| {
        replica::export_facts(
            r,
            &ExportSpec {
                policy: &PeerPolicy::Full,
                since,
                retractions: true,
                skip_author: None,
                echo: None,
                until: None,
            },
            4096,
            |batch| {
                for b in batch {
                    bytes += b.len() as u64;
                    out.push(SignedFact::decode_verified(&b)?);
                }
                Ok(())
            },
        )
    })?;
    Ok((out, bytes))
}

fn exchange(from: &Node, to: &mut Node, since: i64) -> Result<f64> {
    let (facts, _) = facts_since(from, since)?;
    let t0 = Instant::now();
    to.apply_from(&from.node_id(), facts)?;
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

fn line_edit(text: &str, line: usize, tag: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            if i == line {
                format!("{l} [{tag}]\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

const WORDS: [&str; 48] = [
    "check",
    "the",
    "service",
    "restart",
    "worker",
    "pool",
    "drain",
    "node",
    "queue",
    "rotate",
    "logs",
    "verify",
    "backup",
    "snapshot",
    "primary",
    "replica",
    "failover",
    "latency",
    "alert",
    "page",
    "oncall",
    "rollback",
    "deploy",
    "canary",
    "traffic",
    "shift",
    "cache",
    "warm",
    "flush",
    "disk",
    "quota",
    "certificate",
    "renew",
    "token",
    "vault",
    "config",
    "reload",
    "health",
    "probe",
    "timeout",
    "retry",
    "budget",
    "error",
    "rate",
    "dashboard",
    "ticket",
    "close",
    "notes",
];

/// 160 lines of exactly 64 bytes, words drawn by a fixed LCG.
fn runbook() -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = String::new();
    for i in 0..160 {
        let mut line = format!("{i:03}");
        while line.len() < 63 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let w = WORDS[(x >> 33) as usize % WORDS.len()];
            line.push(' ');
            line.push_str(w);
        }
        line.truncate(63);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Run the section in `dir` with `rounds` rounds.
pub fn run(dir: &std::path::Path, rounds: usize) -> Result<TextReport> {
    let open = |name: &str| -> Result<Node> {
        let home = Home::new(dir.join(name));
        Node::init(&home, Some(name))?;
        Node::open(&home)
    };
    let mut a = open("text-a")?;
    let mut b = open("text-b")?;
    let (ida, idb): (NodeId, NodeId) = (a.node_id(), b.node_id());
    a.peer_add(&idb.to_string(), None, "full")?;
    b.peer_add(&ida.to_string(), None, "full")?;
    a.agent_add("alice", "agent", &[])?;

    // A runbook of 10 kB: 160 lines of 64 bytes of varied words (repeated
    // lines would flatter automerge's compression).
    let text = runbook();
    let text_bytes = text.len();
    let who = a.requester("alice")?;
    let mid = a.add(
        &who,
        NewMemory {
            kind: MemoryType::parse("procedure")?,
            ..NewMemory::new(text)
        },
    )?;
    let id = mid.to_string();
    exchange(&a, &mut b, 0)?;

    let (mut merge, mut cold, mut edit) = (Vec::new(), Vec::new(), Vec::new());
    let mut edit_fact_bytes = 0;
    for r in 0..rounds {
        let (since_a, since_b) = (a.store.max_seq()?, b.store.max_seq()?);
        // Apart: a edits line r, b edits line 159 - r.
        let wa = a.requester("alice")?;
        let wb = b.requester("alice")?;
        let ta = line_edit(&text_of(&a, &id)?, r % 160, "a");
        let tb = line_edit(&text_of(&b, &id)?, 159 - r % 160, "b");
        let t0 = Instant::now();
        a.update_with(&wa, &id, &ta, u64::MAX)?;
        edit.push(t0.elapsed().as_secs_f64() * 1e3);
        b.update_with(&wb, &id, &tb, u64::MAX)?;
        let (facts, bytes) = facts_since(&a, since_a)?;
        edit_fact_bytes = bytes;
        let t0 = Instant::now();
        b.apply_from(&ida, facts)?;
        merge.push(t0.elapsed().as_secs_f64() * 1e3);
        crate::store::text_log::forget_warm_documents();
        cold.push(exchange(&b, &mut a, since_b)?);
    }
    let final_a = text_of(&a, &id)?;
    let converged = final_a == text_of(&b, &id)?
        && final_a.lines().count() == 160
        && final_a.matches("[a]").count() == rounds
        && final_a.matches("[b]").count() == rounds;

    let ratio = |node: &Node| -> Result<(f64, f64)> {
        let (log, doc) = node.store.read(|r| stored_bytes(r, &mid))?;
        let t = text_of(node, &id)?.len().max(1) as f64;
        Ok(((log + doc) as f64 / t, log as f64 / t))
    };
    let (overhead_before, _) = ratio(&a)?;
    // One more edit on the origin with a budget below what the log holds.
    let wa = a.requester("alice")?;
    let t = format!("{final_a}done.\n");
    a.update_with(&wa, &id, &t, 1)?;
    let (overhead_after, overhead_after_log) = ratio(&a)?;
    Ok(TextReport {
        text_bytes,
        rounds,
        merge_ms: millis(merge),
        merge_cold_ms: millis(cold),
        edit_ms: millis(edit),
        edit_fact_bytes,
        converged,
        overhead_before,
        overhead_after,
        overhead_after_log,
    })
}
