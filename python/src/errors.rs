//! A `NodeError` as a Python exception: an instance of the class in
//! `amos.errors` that names its kind, carrying the message the CLI prints
//! and the exit code it exits with (`NodeError::exit_code`).
//!
//! Boundary: picks the class and copies fields; the exit code is the node
//! API's, never decided here.

use amos_node::NodeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `e` as the `amos.errors` exception of its kind.
pub fn to_py_err(py: Python<'_>, e: NodeError) -> PyErr {
    match build(py, &e) {
        Ok(err) => err,
        // `amos.errors` did not import: say what failed and why.
        Err(import) => import,
    }
}

fn build(py: Python<'_>, e: &NodeError) -> PyResult<PyErr> {
    let module = py.import("amos.errors")?;
    let extra = PyDict::new(py);
    let class = match e {
        NodeError::NoSuchMemory(_) => "NoSuchMemoryError",
        NodeError::NotAHome(path) => {
            extra.set_item("path", path.display().to_string())?;
            "NotAHomeError"
        }
        NodeError::Unknown { kind, name, .. } => {
            extra.set_item("kind", kind.as_str())?;
            extra.set_item("name", name)?;
            "UnknownNameError"
        }
        NodeError::Refused { rule, .. } => {
            extra.set_item("rule", rule.code())?;
            "RefusedError"
        }
        NodeError::Unreachable { .. } => "UnreachableError",
        e if e.exit_code() == 2 => "BadInputError",
        _ => "AmosError",
    };
    let instance = module
        .getattr(class)?
        .call((e.to_string(), e.exit_code()), Some(&extra))?;
    Ok(PyErr::from_value(instance))
}
