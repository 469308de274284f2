//! What agents and people see of a node beyond the CLI's own output: the
//! MCP server ([`mcp`]) and the JSON views both it and the CLI render
//! ([`view`]).
//!
//! Boundary: renders and parses only; every operation is a call on the node
//! API (`crate::api`).

pub mod mcp;
pub mod view;
