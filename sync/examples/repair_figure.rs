//! The repair figure (docs/bench.md): two nodes' repair sets of `N` facts
//! (default 100 000), one restored from a backup that lacks ~1 % of them —
//! the newest 1 % (facts written after the backup) and, for contrast, a
//! random 1 % — reconciled with `amos_sync::repair` in memory, against a
//! full re-send of the set. Bytes count every session message the repair
//! adds (`RepairOpen`, `RepairRange` each way, `RepairNeed`, `RepairDone`,
//! with their 4-byte frame prefixes) and the `Facts` batches (64 facts per
//! message) of what moves; a fact is `FACT_BYTES` bytes on the wire
//! (default 215: the average of the signed facts in the two-node repair
//! test's full send). Prints one JSON object per scenario.
//!
//!     cargo run --release -p amos-sync --example repair_figure [N] [FACT_BYTES]

use amos_protocol::wire::{MAX_REPAIR_IDS, SyncMessage, SyncV1, Watermark};
use amos_sync::repair::{Initiator, Item, ItemSet, Step, respond};

fn frame(m: SyncV1) -> u64 {
    SyncMessage::V1(m).encode().len() as u64 + 4
}

/// Bytes of `n` facts of `size` bytes in `Facts` batches of 64.
fn facts_bytes(n: u64, size: usize) -> u64 {
    let mut total = 0;
    let mut left = n;
    while left > 0 {
        let k = left.min(64);
        total += frame(SyncV1::Facts {
            facts: vec![vec![0xa5; size]; k as usize],
        });
        left -= k;
    }
    total
}

/// A deterministic 32-byte id (splitmix64 over the index).
fn id(i: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut x = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    for chunk in out.chunks_mut(8) {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes());
    }
    out
}

fn scenario(name: &str, full: &[Item], restored: &[Item], fact_bytes: usize) -> String {
    let a = ItemSet::new(full.iter().copied());
    let b = ItemSet::new(restored.iter().copied());
    // The restored node leads or follows (its epoch is random): measure
    // it as the initiator, asking for what it lacks.
    let (mut ini, mut round) = Initiator::open(b).expect("open");
    let mut bytes = frame(SyncV1::RepairOpen {
        round: round.clone(),
    });
    let mut round_trips = 1u32;
    let outcome = loop {
        let reply = respond(&a, &round).expect("respond");
        bytes += frame(SyncV1::RepairRange {
            round: reply.clone(),
        });
        match ini.step(&reply).expect("step") {
            Step::Next(next) => {
                bytes += frame(SyncV1::RepairRange {
                    round: next.clone(),
                });
                round = next;
                round_trips += 1;
            }
            Step::Done(o) => break o,
        }
    };
    for ids in outcome.request.chunks(MAX_REPAIR_IDS) {
        bytes += frame(SyncV1::RepairNeed { ids: ids.to_vec() });
    }
    let done = SyncV1::RepairDone {
        upto: Watermark {
            epoch: [7; 16],
            seq: full.len() as i64,
        },
    };
    bytes += 2 * frame(done);
    let reconcile_bytes = bytes;
    let moved = outcome.request.len() as u64 + outcome.send.len() as u64;
    bytes += facts_bytes(moved, fact_bytes);
    let resend = facts_bytes(full.len() as u64, fact_bytes);
    format!(
        "{{\"scenario\":\"{name}\",\"facts\":{},\"missing\":{},\"round_trips\":{round_trips},\
         \"reconcile_bytes\":{reconcile_bytes},\"facts_moved\":{moved},\"repair_bytes\":{bytes},\
         \"full_resend_bytes\":{resend},\"repair_percent_of_resend\":{:.3}}}",
        full.len(),
        full.len() - restored.len(),
        100.0 * bytes as f64 / resend as f64
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let fact_bytes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(215);
    // One fact per millisecond-ish, as a node's clock stamps them.
    let full: Vec<Item> = (0..n)
        .map(|i| Item {
            ts: (1_800_000_000_000u64 + i * 7) << 16,
            id: id(i),
        })
        .collect();
    let keep = n - n / 100;
    let newest_lost: Vec<Item> = full[..keep as usize].to_vec();
    let random_lost: Vec<Item> = full
        .iter()
        .copied()
        // 655 / 65 536 of the id space: 1 %.
        .filter(|it| u32::from(it.id[0]) * 256 + u32::from(it.id[1]) >= 655)
        .collect();
    println!(
        "{}",
        scenario("restored: newest 1% lost", &full, &newest_lost, fact_bytes)
    );
    println!(
        "{}",
        scenario("random 1% lost", &full, &random_lost, fact_bytes)
    );
}
