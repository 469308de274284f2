//! `amos.Node`: one open node (`amos_node::Node`) and the calls of the
//! CLI's memory and recall commands on it, each with the requester named
//! as the CLI's `--as` names it (`as_`).
//!
//! Every call lets go of the interpreter lock while the node works (other
//! Python threads run meanwhile; calls on one `Node` take turns) and takes
//! it back only to build the result.
//!
//! Boundary: arguments are parsed by the CLI's parsers and results rendered
//! by its JSON views; a requester comes only from `Node::requester`, so
//! nothing invisible to it can reach a result. Never holds the node's lock
//! while holding the interpreter's.

use std::path::PathBuf;
use std::sync::Mutex;

use amos_node::front::{AddRequest, HitView, TimeRequest};
use amos_node::recall::{DEFAULT_BUDGET, DEFAULT_K, PackOptions, RecallOptions};
use amos_node::{Home, Node, NodeError, Result};
use amos_protocol::MemoryType;
use pyo3::prelude::*;
use pyo3::types::PyString;
use serde_json::{Value, json};

use crate::convert::to_py;
use crate::errors::to_py_err;

/// A node's home opened from Python (`amos.Node(home)`): the same home, the
/// same rules and the same answers as the `amos` command line on it, beside
/// a running `amos serve` if there is one.
#[pyclass(module = "amos._amos", name = "Node", frozen)]
pub struct PyNode {
    node: Mutex<Node>,
    home: PathBuf,
}

/// A keyword argument as Python calls it (`valid-at` → `valid_at`), for
/// the one error line a bad one gets.
fn label(field: &str) -> String {
    field.replace('-', "_")
}

/// The `mode` argument: the node's default when absent.
/// `share` as one scope (`"team:apollo"`) or a list of them.
fn scopes(share: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match share {
        None => Ok(Vec::new()),
        Some(s) if s.is_instance_of::<PyString>() => Ok(vec![s.extract()?]),
        Some(s) => s.extract(),
    }
}

impl PyNode {
    /// Run `f` on the node as `as_`, without the interpreter lock.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Node) -> Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut node = match self.node.lock() {
                Ok(n) => n,
                Err(poisoned) => poisoned.into_inner(),
            };
            f(&mut node)
        })
        .map_err(|e| to_py_err(py, e))
    }

    /// [`PyNode::with`], its JSON result as a Python value.
    fn json<'py>(
        &self,
        py: Python<'py>,
        f: impl FnOnce(&mut Node) -> Result<Value> + Send,
    ) -> PyResult<Bound<'py, PyAny>> {
        let v = self.with(py, f)?;
        to_py(py, &v)
    }
}

#[pymethods]
impl PyNode {
    /// Open the amos home at `home` (made by `amos init`); `model` is a
    /// model2vec directory, as the CLI's `--model`.
    #[new]
    #[pyo3(signature = (home, *, model = None))]
    fn new(py: Python<'_>, home: PathBuf, model: Option<PathBuf>) -> PyResult<PyNode> {
        let h = Home::new(home.clone()).with_model(model);
        let node = py
            .detach(|| {
                let mut node = Node::open(&h)?;
                node.set_front("python");
                Ok::<_, NodeError>(node)
            })
            .map_err(|e| to_py_err(py, e))?;
        Ok(PyNode {
            node: Mutex::new(node),
            home,
        })
    }

    /// The home directory.
    #[getter]
    fn home(&self) -> PathBuf {
        self.home.clone()
    }

    /// The node's id (`amos id`).
    #[getter]
    fn node_id(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |n| Ok(n.node_id().to_string()))
    }

    fn __repr__(&self) -> String {
        format!("amos.Node({:?})", self.home.display().to_string())
    }

    /// Store a memory owned by `as_` (private unless `share` names scopes);
    /// returns its id. As `amos add`.
    #[pyo3(signature = (
        content, *, as_, share = None, r#type = None, tags = None, importance = None,
        pin = false, expires = None, valid_from = None, valid_to = None, supersedes = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        py: Python<'_>,
        content: String,
        as_: String,
        share: Option<Bound<'_, PyAny>>,
        r#type: Option<String>,
        tags: Option<Vec<String>>,
        importance: Option<f32>,
        pin: bool,
        expires: Option<String>,
        valid_from: Option<String>,
        valid_to: Option<String>,
        supersedes: Option<String>,
    ) -> PyResult<String> {
        let request = AddRequest {
            content,
            kind: r#type,
            share: scopes(share.as_ref())?,
            tags: tags.unwrap_or_default(),
            importance,
            pin,
            expires,
            valid_from,
            valid_to,
            supersedes,
        };
        self.with(py, move |n| {
            let who = n.requester(&as_)?;
            let new = request.memory_with(n.now_ms(), label, |s| n.resolve_scope(s))?;
            Ok(n.add(&who, new)?.to_string())
        })
    }

    /// Gated, ranked recall of `query` for `as_`: a list of hits, each the
    /// dict `amos --json search` prints (`id`, `content`, `score`, …).
    #[pyo3(signature = (
        query, *, as_, k = DEFAULT_K, mode = None, since = None, until = None,
        valid_at = None, known_at = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: String,
        as_: String,
        k: usize,
        mode: Option<String>,
        since: Option<String>,
        until: Option<String>,
        valid_at: Option<String>,
        known_at: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let time = TimeRequest {
            since,
            until,
            valid_at,
            known_at,
        };
        let hits = self.with(py, move |n| {
            let who = n.requester(&as_)?;
            let opts = RecallOptions {
                k,
                time: time.query(n.now_ms(), label)?,
                mode: amos_node::front::recall_mode(mode.as_deref())?,
                ..RecallOptions::default()
            };
            n.search_with(&who, &query, &opts)
        })?;
        // The dicts `hit_json` stands for, made without its `Value`s.
        let views: Vec<HitView<'_>> = hits.iter().map(HitView).collect();
        to_py(py, &views)
    }

    /// A context pack of `query` for `as_` within `budget` tokens: the dict
    /// `amos --json pack` prints (`items`, `tokens`, `budget`, …).
    #[pyo3(signature = (
        query, *, as_, budget = DEFAULT_BUDGET, report = false, mode = None, since = None,
        until = None, valid_at = None, known_at = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn pack<'py>(
        &self,
        py: Python<'py>,
        query: String,
        as_: String,
        budget: usize,
        report: bool,
        mode: Option<String>,
        since: Option<String>,
        until: Option<String>,
        valid_at: Option<String>,
        known_at: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let time = TimeRequest {
            since,
            until,
            valid_at,
            known_at,
        };
        self.json(py, move |n| {
            let who = n.requester(&as_)?;
            let mut opts = PackOptions::new(budget);
            opts.recall.time = time.query(n.now_ms(), label)?;
            opts.recall.mode = amos_node::front::recall_mode(mode.as_deref())?;
            let p = n.pack_with(&who, &query, &opts)?;
            Ok(amos_node::front::pack_json(&p, report))
        })
    }

    /// One memory, if `as_` may see it (else `NoSuchMemoryError`, the same
    /// answer as for a memory that does not exist): the dict `amos --json
    /// get` prints.
    #[pyo3(signature = (id, *, as_))]
    fn get<'py>(&self, py: Python<'py>, id: String, as_: String) -> PyResult<Bound<'py, PyAny>> {
        self.json(py, move |n| {
            let who = n.requester(&as_)?;
            Ok(amos_node::front::memory_json(&n.get(&who, &id)?))
        })
    }

    /// Memories `as_` may see, newest first, each with its valid time: the
    /// dicts `amos --json list` prints.
    #[pyo3(signature = (
        *, as_, r#type = None, limit = 20, since = None, until = None, valid_at = None,
        known_at = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn list<'py>(
        &self,
        py: Python<'py>,
        as_: String,
        r#type: Option<String>,
        limit: usize,
        since: Option<String>,
        until: Option<String>,
        valid_at: Option<String>,
        known_at: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let time = TimeRequest {
            since,
            until,
            valid_at,
            known_at,
        };
        self.json(py, move |n| {
            let who = n.requester(&as_)?;
            let kind = r#type
                .map(|k| MemoryType::parse(&k))
                .transpose()
                .map_err(NodeError::from)?;
            let q = time.query(n.now_ms(), label)?;
            let timed = n.list_in_time(&who, kind.as_ref(), limit, &q)?;
            Ok(Value::Array(
                timed
                    .iter()
                    .map(|(m, vt)| amos_node::front::timed_json(m, vt))
                    .collect(),
            ))
        })
    }

    /// The memories `as_` may see and their supersessions in valid-time
    /// order: the events `amos --json timeline` prints.
    #[pyo3(signature = (*, as_, since = None, until = None, scope = None, limit = 100))]
    fn timeline<'py>(
        &self,
        py: Python<'py>,
        as_: String,
        since: Option<String>,
        until: Option<String>,
        scope: Option<String>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.json(py, move |n| {
            let who = n.requester(&as_)?;
            let q = TimeRequest {
                since,
                until,
                ..TimeRequest::default()
            }
            .query(n.now_ms(), label)?;
            let scope = scope.map(|s| n.resolve_scope(&s)).transpose()?;
            let events = n.timeline(&who, q.since_ms, q.until_ms, scope.as_ref(), limit)?;
            Ok(json!(events))
        })
    }

    /// Replace a memory's text (owner only), as `amos update`; returns its
    /// id.
    #[pyo3(signature = (id, content, *, as_))]
    fn update(&self, py: Python<'_>, id: String, content: String, as_: String) -> PyResult<String> {
        self.with(py, move |n| {
            let who = n.requester(&as_)?;
            let id = n.revise(
                &who,
                &id,
                Some(&content),
                None,
                amos_node::api::DEFAULT_COMPACT_BYTES,
            )?;
            Ok(id.to_string())
        })
    }

    /// Tombstone a memory (owner only), as `amos forget`; returns its id.
    #[pyo3(signature = (id, *, as_))]
    fn forget(&self, py: Python<'_>, id: String, as_: String) -> PyResult<String> {
        self.with(py, move |n| {
            let who = n.requester(&as_)?;
            Ok(n.forget(&who, &id)?.to_string())
        })
    }
}
