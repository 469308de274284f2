//! `/graph?as=AGENT&around=ID[&depth=N]`: the memories the agent sees
//! within N hops of one (default 2, at most 4; at most 60 memories), over
//! links and supersessions both ways (`Node::neighbourhood`), drawn here as
//! an inline SVG: the centre in the middle, each hop on a ring around it,
//! the memories of a ring evenly spaced in the order the walk found them —
//! a function of the graph alone, so the same graph is drawn the same way.
//! Each memory is a link to its page.
//!
//! Must never: draw, name or count a memory the agent cannot see (the node
//! API leaves it out, and with it every edge to it); use a script or an
//! inline style (the CSP forbids both: styling is by class, in
//! `assets/console.css`); put text in the SVG but through the template,
//! which escapes it.

use std::collections::HashMap;
use std::f64::consts::PI;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Extension, State};
use axum::response::Response;
use serde::Deserialize;

use super::App;
use super::i18n::Locale;
use super::page::{Chrome, PageError, QueryIn, given, html, with_node};
use crate::api::{EdgeKind, GRAPH_DEFAULT_DEPTH, GRAPH_MAX_DEPTH, GRAPH_MAX_NODES, Neighbourhood};
use crate::front::view::one_line;

/// The drawing's size (SVG user units), its centre, and the room per ring.
const SIZE: f64 = 760.0;
const MID: f64 = SIZE / 2.0;
const OUTER: f64 = 320.0;
const DOT: f64 = 11.0;

/// A memory drawn.
struct Dot {
    id: String,
    x: String,
    y: String,
    /// Where its label goes.
    lx: String,
    ly: String,
    label: String,
    title: String,
    centre: bool,
    hop: usize,
}

/// An edge drawn.
struct Line {
    x1: String,
    y1: String,
    x2: String,
    y2: String,
    supersedes: bool,
    title: String,
}

/// A ring's radius.
struct Ring {
    r: String,
}

#[derive(Template)]
#[template(path = "console/graph.html")]
struct GraphPage {
    chrome: Chrome,
    around: String,
    depth: usize,
    size: u32,
    mid: String,
    dots: Vec<Dot>,
    lines: Vec<Line>,
    rings: Vec<Ring>,
    truncated: bool,
    max_nodes: usize,
    drawn: bool,
}

#[derive(Deserialize)]
pub(crate) struct GraphQuery {
    #[serde(rename = "as")]
    agent: Option<String>,
    around: Option<String>,
    depth: Option<String>,
}

fn f(v: f64) -> String {
    format!("{v:.1}")
}

/// Where each memory of `g` goes: (x, y) by its index in `g.nodes`.
fn layout(g: &Neighbourhood) -> Vec<(f64, f64)> {
    let deepest = g.nodes.iter().map(|n| n.hop).max().unwrap_or(0).max(1);
    let step = OUTER / deepest as f64;
    let mut per_ring: HashMap<usize, usize> = HashMap::new();
    for n in &g.nodes {
        *per_ring.entry(n.hop).or_default() += 1;
    }
    let mut placed: HashMap<usize, usize> = HashMap::new();
    g.nodes
        .iter()
        .map(|n| {
            if n.hop == 0 {
                return (MID, MID);
            }
            let k = placed.entry(n.hop).or_default();
            let i = *k;
            *k += 1;
            let count = per_ring[&n.hop] as f64;
            // Rings are turned a little each, so spokes do not line up.
            let angle = -PI / 2.0 + 2.0 * PI * i as f64 / count + n.hop as f64 * 0.35;
            let r = step * n.hop as f64;
            (MID + r * angle.cos(), MID + r * angle.sin())
        })
        .collect()
}

fn draw(page: &mut GraphPage, g: &Neighbourhood, agent_edges: &str) {
    let at = layout(g);
    let index: HashMap<_, _> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.memory.id(), i))
        .collect();
    for e in &g.edges {
        let (Some(&a), Some(&b)) = (index.get(&e.from), index.get(&e.to)) else {
            continue;
        };
        let ((x1, y1), (x2, y2)) = (at[a], at[b]);
        // Stop short of the target's dot, for the arrow head.
        let (dx, dy) = (x2 - x1, y2 - y1);
        let len = (dx * dx + dy * dy).sqrt().max(1.0);
        let (x2, y2) = (x2 - dx / len * (DOT + 2.0), y2 - dy / len * (DOT + 2.0));
        let (supersedes, title) = match &e.kind {
            EdgeKind::Supersedes => (true, format!("{} {agent_edges} {}", e.from, e.to)),
            EdgeKind::Link { relation, weight } => (
                false,
                format!("{} → {} {relation} {weight:.2}", e.from, e.to),
            ),
        };
        page.lines.push(Line {
            x1: f(x1),
            y1: f(y1),
            x2: f(x2),
            y2: f(y2),
            supersedes,
            title,
        });
    }
    let deepest = g.nodes.iter().map(|n| n.hop).max().unwrap_or(0);
    let step = OUTER / deepest.max(1) as f64;
    page.rings = (1..=deepest)
        .map(|k| Ring {
            r: f(step * k as f64),
        })
        .collect();
    for (n, (x, y)) in g.nodes.iter().zip(at) {
        page.dots.push(Dot {
            id: n.memory.id().to_string(),
            x: f(x),
            y: f(y),
            lx: f(x + DOT + 3.0),
            ly: f(y + 4.0),
            label: one_line(n.memory.content(), 28),
            title: one_line(n.memory.content(), 200),
            centre: n.hop == 0,
            hop: n.hop,
        });
    }
}

pub(crate) async fn show(
    State(app): State<Arc<App>>,
    Extension(loc): Extension<Locale>,
    QueryIn(q): QueryIn<GraphQuery>,
) -> Result<Response, PageError> {
    let depth = match given(&q.depth) {
        None => GRAPH_DEFAULT_DEPTH,
        Some(d) => d
            .parse::<usize>()
            .ok()
            .filter(|d| (1..=GRAPH_MAX_DEPTH).contains(d))
            .ok_or_else(|| {
                PageError::bad(format!(
                    "malformed depth {d:?}: a number of hops from 1 to {GRAPH_MAX_DEPTH}"
                ))
            })?,
    };
    let p = with_node(&app, move |node, app| {
        let agent = given(&q.agent).unwrap_or("").to_owned();
        let around = given(&q.around).unwrap_or("").to_owned();
        let mut page = GraphPage {
            chrome: Chrome::new(app, node, "graph", &agent, &loc)?,
            around: around.clone(),
            depth,
            size: SIZE as u32,
            mid: f(MID),
            dots: Vec::new(),
            lines: Vec::new(),
            rings: Vec::new(),
            truncated: false,
            max_nodes: GRAPH_MAX_NODES,
            drawn: false,
        };
        if agent.is_empty() {
            return Ok(page);
        }
        let who = node.requester(&agent)?;
        if around.is_empty() {
            return Ok(page);
        }
        let g = node.neighbourhood(&who, &around, depth, GRAPH_MAX_NODES)?;
        draw(&mut page, &g, loc.lang.t("graph.replaces"));
        page.truncated = g.truncated;
        page.drawn = true;
        Ok(page)
    })
    .await?;
    html(&p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout is a function of the graph: the centre in the middle,
    /// hop k on the ring of radius k·(OUTER / deepest hop), every memory
    /// inside the drawing.
    #[test]
    fn rings_by_hop_inside_the_drawing() {
        let dir = tempfile::tempdir().unwrap();
        let home = crate::home::Home::new(dir.path());
        crate::api::Node::init(&home, Some("n")).unwrap();
        let mut node = crate::api::Node::open(&home).unwrap();
        node.agent_add("alice", "agent", &[]).unwrap();
        let who = node.requester("alice").unwrap();
        let mut ids = Vec::new();
        for i in 0..7 {
            let id = node
                .add(&who, crate::api::NewMemory::new(format!("memory {i}")))
                .unwrap();
            ids.push(id.to_string());
        }
        // A star around 0 (hop 1: 1..=4), and 5, 6 behind 1 (hop 2).
        for i in 1..=4 {
            node.link(&who, &ids[0], &ids[i], None, 0.5).unwrap();
        }
        node.link(&who, &ids[1], &ids[5], None, 0.5).unwrap();
        node.link(&who, &ids[6], &ids[1], None, 0.5).unwrap();
        let g = node.neighbourhood(&who, &ids[0], 2, 60).unwrap();
        let at = layout(&g);
        assert_eq!(at[0], (MID, MID));
        for (n, (x, y)) in g.nodes.iter().zip(&at) {
            let r = ((x - MID).powi(2) + (y - MID).powi(2)).sqrt();
            assert!((r - OUTER / 2.0 * n.hop as f64).abs() < 1e-6, "{r}");
            assert!(*x > 0.0 && *x < SIZE && *y > 0.0 && *y < SIZE);
        }
        assert_eq!(layout(&g), at, "the same graph, the same drawing");
        assert_eq!(g.nodes.iter().filter(|n| n.hop == 1).count(), 4);
        assert_eq!(g.nodes.iter().filter(|n| n.hop == 2).count(), 2);
    }
}
