//! What agents and people see of a node beyond the CLI's own output: the
//! MCP server ([`mcp`]), the web console ([`console`]), the JSON API and
//! MCP over HTTP ([`http`]), the JSON views both
//! MCP and the CLI render ([`view`]), and the one parser of what they take
//! as strings ([`request`]).
//!
//! Boundary: renders and parses only; every operation is a call on the node
//! API (`crate::api`).

pub mod console;
pub mod http;
pub mod mcp;
pub(crate) mod request;
pub(crate) mod view;

pub use request::{AddRequest, TimeRequest, recall_mode, validity};
pub use view::{
    HitView, MemoryView, change_line, changes_json, context_json, context_summary_json, hit_json,
    memory_json, one_line, outcome_line, pack_json, timed_json, timeline_line,
};
