//! amos-node's integration tests, one binary (one link of tantivy,
//! automerge and quinn instead of one per file): each module is what was a
//! test file. Most drive the real `amos` binary in temp homes; multi-node
//! ones run real processes over QUIC on 127.0.0.1.

mod common;

mod analyzer;
mod bench_smoke;
mod bundles;
mod cli_bad_input;
mod concurrency;
mod console;
mod console_actions;
mod console_browser;
mod console_time;
mod console_views;
mod deep_eval;
mod demo;
mod deploy;
mod discovery;
mod doctor;
mod encoder;
mod encoder_serve;
mod eval;
mod far_future;
mod first_hour;
mod first_hour_answers;
mod gate_and_recall;
mod http;
mod http_mcp;
mod import;
mod mailbox;
mod mcp;
mod mcp_describe;
mod mesh;
mod mesh_three;
mod metrics;
mod pairing;
mod peer_rows;
mod progress;
mod push;
mod python;
mod read_audit;
mod readme;
mod recall_engine;
mod relay;
mod relay_mailbox;
mod repair;
mod replication;
mod revocation_mesh;
mod scopes;
mod score_invariance;
mod semantic;
mod serve_waits;
mod sync_session;
mod text_edits;
mod time_rules;
mod time_travel;
mod transport;
mod trust;
mod upgrade;
mod versions;
