//! What agents and people see of a node beyond the CLI's own output: the
//! MCP server ([`mcp`]) and the JSON views both it and the CLI render
//! ([`view`]), and the one parser of what both take as strings
//! ([`request`]).
//!
//! Boundary: renders and parses only; every operation is a call on the node
//! API (`crate::api`).

pub mod console;
pub mod mcp;
pub mod request;
pub mod view;
