//! Arbitrary bytes as a file handed to every importer (`amos import mem0 |
//! chatgpt | hermes | agent-memory-os | amos FILE`): each must answer with a
//! plan or an error, never panic. The importers read a path, so the bytes
//! go through one temp file per process.
#![no_main]

use std::sync::OnceLock;

use amos_node::api::import::{amos, aos, chatgpt, hermes, mem0};
use amos_protocol::{AgentId, Scope};
use libfuzzer_sys::fuzz_target;

fn dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
}

fuzz_target!(|data: &[u8]| {
    let owner = AgentId::parse("alice").expect("slug");
    let share = [Scope::Global];
    // Names the importers recognise by (a bundle, a ChatGPT export, notes).
    for name in ["x.jsonl", "conversations.json", "MEMORY.md"] {
        let path = dir().path().join(name);
        std::fs::write(&path, data).expect("write the input");
        let _ = mem0::read(&path, &owner, &share);
        let _ = chatgpt::read(&path, &owner, &share);
        let _ = hermes::read(&path, &owner, &share);
        let _ = aos::read(&path);
        // An amos export read as its header's agent, and as one `--as` named.
        let _ = amos::read(&path, None);
        let _ = amos::read(&path, Some(&owner));
    }
});
