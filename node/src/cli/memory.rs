//! Memory commands: add, get, search, pack, list, update, history, share,
//! unshare, forget, link, feedback, restore-memory, profile.

use super::*;

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Add {
            text,
            who: w,
            kind,
            share,
            importance,
            tag,
            pin,
            expires,
            valid,
            supersedes,
        } => {
            let text = text_arg(text)?;
            let who = who(node, &w)?;
            let new = amos_node::front::request::AddRequest {
                content: text,
                kind,
                share,
                tags: tag,
                importance: Some(importance),
                pin,
                expires,
                valid_from: valid.valid_from,
                valid_to: valid.valid_to,
                supersedes,
            }
            .memory(node.now_ms(), |f| format!("--{f}"))?;
            let id = node.add(&who, new)?;
            out.emit(&json!({"id": id.to_string()}), || id.to_string());
        }
        Cmd::Supersede {
            id,
            text,
            who: w,
            share,
            valid,
        } => {
            let text = text_arg(text)?;
            let who = who(node, &w)?;
            let validity = valid.validity(node.now_ms())?;
            let share = match share.is_empty() {
                true => None,
                false => Some(
                    share
                        .iter()
                        .map(|s| s.parse::<amos_protocol::Scope>().map_err(NodeError::from))
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            };
            let new = node.supersede(&who, &id, text, share, validity)?;
            out.emit(&json!({"id": new.to_string(), "supersedes": id}), || {
                new.to_string()
            });
        }
        Cmd::Timeline {
            who: w,
            since,
            until,
            scope,
            limit,
        } => {
            let who = who(node, &w)?;
            let q = TimeArgs {
                since,
                until,
                ..TimeArgs::default()
            }
            .query(node.now_ms())?;
            let scope = scope
                .map(|s| s.parse::<amos_protocol::Scope>().map_err(NodeError::from))
                .transpose()?;
            let events = node.timeline(&who, q.since_ms, q.until_ms, scope.as_ref(), limit)?;
            out.emit(&json!({"events": events}), || {
                events
                    .iter()
                    .map(amos_node::front::view::timeline_line)
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        Cmd::Get { id, who: w } => {
            let who = who(node, &w)?;
            let m = node.get(&who, &id)?;
            out.emit(&memory_json(&m), || output::memory_text(&m));
        }
        Cmd::Search {
            query,
            who: w,
            k,
            explain,
            ranking,
            time,
        } => {
            let who = who(node, &w)?;
            let opts = amos_node::recall::RecallOptions {
                k,
                half_life_ms: ranking.half_life_ms()?,
                time: time.query(node.now_ms())?,
                mode: ranking.mode.into(),
                ..Default::default()
            };
            let hits = node.search_with(&who, &query, &opts)?;
            out.emit(
                &json!({"hits": hits.iter().map(hit_json).collect::<Vec<_>>()}),
                || output::hits_text(&hits, explain),
            );
        }
        Cmd::Pack {
            query,
            who: w,
            budget,
            report,
            reinforce,
            ranking,
            time,
        } => {
            let who = who(node, &w)?;
            let mut opts = amos_node::recall::PackOptions::new(budget);
            opts.recall.half_life_ms = ranking.half_life_ms()?;
            opts.recall.mode = ranking.mode.into();
            opts.recall.time = time.query(node.now_ms())?;
            opts.reinforce = reinforce;
            let p = node.pack_with(&who, &query, &opts)?;
            out.emit(&output::pack_json(&p, report), || {
                output::pack_text(&p, report)
            });
        }
        Cmd::Profile(p) => {
            let (agent, weights) = match p {
                ProfileCmd::Set { agent, weights } => {
                    let weights = weights
                        .iter()
                        .map(|w| amos_node::api::parse_weight(w))
                        .collect::<Result<Vec<_>, _>>()?;
                    let set = node.profile_set(&agent, &weights)?;
                    (agent, set)
                }
                ProfileCmd::Show { agent } => {
                    let w = node.profile_show(&agent)?;
                    (agent, w)
                }
            };
            out.emit(&json!({"agent": agent, "weights": weights}), || {
                if weights.is_empty() {
                    format!("{agent}: no weights (every type weighs 1)")
                } else {
                    weights
                        .iter()
                        .map(|(t, w)| format!("{agent}  {t}={w}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                }
            });
        }
        Cmd::Update {
            id,
            text,
            valid,
            compact_at,
            who: w,
        } => {
            let who = who(node, &w)?;
            let validity = match (&valid.valid_from, &valid.valid_to) {
                (None, None) => None,
                _ => Some(valid.validity(node.now_ms())?),
            };
            let id = node.revise(&who, &id, text.as_deref(), validity, compact_at)?;
            out.emit(&json!({"id": id.to_string()}), || format!("updated {id}"));
        }
        Cmd::History { id, who: w } => {
            let who = who(node, &w)?;
            let (id, lines) = node.history(&who, &id)?;
            out.emit(&json!({"id": id.to_string(), "edits": lines}), || {
                lines
                    .iter()
                    .map(|l| {
                        let size = l
                            .bytes
                            .map_or_else(|| "compacted".to_owned(), |b| format!("{b} B"));
                        format!(
                            "{}  {:<8}  {}  {}",
                            amos_node::clock::rfc3339(l.wall_ms),
                            l.kind,
                            &l.author[..10.min(l.author.len())],
                            size
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        Cmd::Share { id, scope, who: w } => set_grant(node, out, &w, &id, &scope, true)?,
        Cmd::Unshare { id, scope, who: w } => set_grant(node, out, &w, &id, &scope, false)?,
        Cmd::Forget {
            every_of: Some(agent),
            yes,
            ..
        } => super::moves::forget_agent(node, out, &agent, yes)?,
        Cmd::Forget { id, who: w, .. } => {
            let id = id.ok_or_else(|| bad("name the memory to forget, or --agent A --all"))?;
            let who = who(node, &w)?;
            let id = node.forget(&who, &id)?;
            out.emit(&json!({"id": id.to_string()}), || format!("forgot {id}"));
        }
        Cmd::Link {
            a,
            b,
            relation,
            weight,
            who: w,
        } => {
            let who = who(node, &w)?;
            node.link(&who, &a, &b, relation.as_deref(), weight)?;
            out.emit(&json!({"from": a, "to": b}), || format!("linked {a} → {b}"));
        }
        Cmd::Feedback {
            ids,
            who: w,
            helpful,
            ..
        } => {
            let who = who(node, &w)?;
            let r = node.feedback(&who, &ids, helpful)?;
            out.emit(
                &json!({"updated": r.memories, "links": r.links, "associations": r.associations}),
                || {
                    format!(
                        "feedback recorded for {} memories, {} links and {} associations among them",
                        r.memories, r.links, r.associations
                    )
                },
            );
        }
        Cmd::RestoreMemory { id, who: w } => {
            let who = who(node, &w)?;
            let changed = node.set_archived(&who, &id, false)?;
            out.emit(&json!({"id": id, "restored": changed}), || {
                if changed {
                    format!("restored {id}")
                } else {
                    format!("{id} was not archived")
                }
            });
        }
        Cmd::List {
            who: w,
            kind,
            limit,
            time,
        } => {
            let who = who(node, &w)?;
            let kind = kind
                .map(|k| MemoryType::parse(&k))
                .transpose()
                .map_err(NodeError::from)?;
            let q = time.query(node.now_ms())?;
            let timed = node.list_in_time(&who, kind.as_ref(), limit, &q)?;
            let ms: Vec<_> = timed.iter().map(|(m, _)| m.clone()).collect();
            out.emit(
                &json!({"memories": timed.iter().map(|(m, vt)| amos_node::front::view::timed_json(m, vt)).collect::<Vec<_>>()}),
                || {
                    ms.iter()
                        .map(|m| {
                            format!(
                                "{}  [{}] {}: {}",
                                m.id(),
                                m.kind(),
                                m.owner(),
                                output::one_line(m.content(), 100)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                },
            );
        }
        other => {
            return Err(anyhow::anyhow!(
                "internal: {other:?} is not a memory command"
            ));
        }
    }
    Ok(())
}

/// A text argument; `-` reads stdin.
fn text_arg(text: String) -> Result<String> {
    if text != "-" {
        return Ok(text);
    }
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            bad("content on stdin is not valid UTF-8")
        } else {
            anyhow::Error::new(e).context("reading stdin")
        }
    })?;
    Ok(s)
}

impl ValidArgs {
    fn validity(&self, now_ms: u64) -> Result<amos_protocol::Validity> {
        Ok(amos_node::front::request::validity(
            self.valid_from.as_deref(),
            self.valid_to.as_deref(),
            now_ms,
            &|f: &str| format!("--{f}"),
        )?)
    }
}
