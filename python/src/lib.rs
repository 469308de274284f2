//! `amos._amos`: the node API (`amos_node::Node`) as a Python extension
//! module, re-exported by the pure-Python package `amos` (python/amos/).
//! [`node`] is the `amos.Node` class, [`convert`] turns the JSON views the
//! CLI prints into Python values, [`errors`] turns a `NodeError` into the
//! `amos.errors` exception that carries the CLI's exit code.
//!
//! Boundary: a front end like the CLI and MCP: every operation is a call on
//! the node API, every argument string goes through the parsers the CLI
//! uses (`amos_node::front::{AddRequest, TimeRequest}`) and every result
//! through its JSON views (`amos_node::front::{hit_json, …}`). No rule of
//! visibility, time or ranking is written here, and no SQL.
//!
//! The workspace's `unsafe_code = "deny"` holds here: PyO3's macros keep
//! the C API glue they generate to themselves.

mod convert;
mod errors;
mod node;

use pyo3::prelude::*;

/// The extension module `amos._amos`.
#[pymodule]
fn _amos(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<node::PyNode>()?;
    m.add("DEFAULT_K", amos_node::recall::DEFAULT_K)?;
    m.add("DEFAULT_BUDGET", amos_node::recall::DEFAULT_BUDGET)?;
    Ok(())
}
