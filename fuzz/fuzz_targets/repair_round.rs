//! Arbitrary bytes as a peer's repair round (`RepairOpen`/`RepairRange`'s
//! `round`, docs/design.md §7.9): the first byte says who reads it — the
//! responder (an opening or later round) or the initiator (a reply) — the
//! rest is the round. Negentropy's decoder behind `amos_sync::repair` must
//! answer with a round or an error, never panic or allocate past the
//! input; whatever reconciles only names ids of the sets involved.
#![no_main]

use amos_sync::repair::{Initiator, Item, ItemSet, Step, fact_id, respond};
use libfuzzer_sys::fuzz_target;

fn set(n: u32, skip: u32) -> ItemSet {
    ItemSet::new((0..n).filter(|i| i % 7 != skip).map(|i| Item {
        ts: u64::from(i / 3) << 16,
        id: fact_id(&i.to_le_bytes()),
    }))
}

fuzz_target!(|data: &[u8]| {
    let Some((&side, round)) = data.split_first() else {
        return;
    };
    let ours = set(200, 3);
    if side & 1 == 0 {
        let _ = respond(&ours, round);
        let _ = respond(&ItemSet::default(), round);
    } else if let Ok((mut ini, _)) = Initiator::open(ours.clone()) {
        if let Ok(Step::Done(o)) = ini.step(round) {
            // What we are told to send is ours.
            assert!(o.send.iter().all(|id| ours.contains(id)));
        }
    }
});
