//! One parser for what the CLI and the MCP server both take as strings: a
//! new memory (`amos add`, the `memory_add` tool) and the time filters of
//! recall (`--since`, `--valid-at`, … and their MCP twins). Each front end
//! fills an [`AddRequest`] or a [`TimeRequest`] its own way (clap flags,
//! JSON arguments); what the fields mean and how a bad one is refused is
//! written once, here.

use amos_protocol::{MemoryId, MemoryType, Scope, Validity};
use serde::Deserialize;

use crate::api::NewMemory;
use crate::clock::{parse_expiry_unbounded, parse_time_unbounded, time_refusal, within_bound};
use crate::error::{NodeError, Result};
use crate::recall::{RecallMode, TimeQuery};

/// A point in time a user wrote, read at `now_ms`; a bad one (malformed,
/// a bare duration, or past the latest time amos keeps) names its field.
fn time_field(
    v: Option<&str>,
    now_ms: u64,
    name: &str,
    label: &impl Fn(&str) -> String,
) -> Result<Option<u64>> {
    v.map(|s| {
        // Only a memory's end is more often ahead than behind.
        let ms = parse_time_unbounded(s, now_ms)
            .map_err(|_| time_refusal(&label(name), s, name == "valid-to"))?;
        within_bound(ms, &label(name), s)
    })
    .transpose()
}

/// A memory's valid time as strings (`valid_from`, `valid_to`).
pub fn validity(
    from: Option<&str>,
    to: Option<&str>,
    now_ms: u64,
    label: &impl Fn(&str) -> String,
) -> Result<Validity> {
    let v = Validity {
        from_ms: time_field(from, now_ms, "valid-from", label)?,
        to_ms: time_field(to, now_ms, "valid-to", label)?,
    };
    if let (Some(_), Some(_)) = (v.from_ms, v.to_ms) {
        crate::api::memories::check_validity(&v, 0)?;
    }
    Ok(v)
}

/// The time filters of a recall as strings. As JSON: `since`, `until`,
/// `valid_at`, `known_at`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TimeRequest {
    /// Only memories whose valid time starts at or after this.
    pub since: Option<String>,
    /// Only memories whose valid time starts at or before this.
    pub until: Option<String>,
    /// True in the world at this time.
    pub valid_at: Option<String>,
    /// As this node knew it then.
    pub known_at: Option<String>,
}

impl TimeRequest {
    /// The query this asks for, at `now_ms`.
    pub fn query(&self, now_ms: u64, label: impl Fn(&str) -> String) -> Result<TimeQuery> {
        let q = TimeQuery {
            since_ms: time_field(self.since.as_deref(), now_ms, "since", &label)?,
            until_ms: time_field(self.until.as_deref(), now_ms, "until", &label)?,
            valid_at_ms: time_field(self.valid_at.as_deref(), now_ms, "valid-at", &label)?,
            known_at_ms: time_field(self.known_at.as_deref(), now_ms, "known-at", &label)?,
        };
        if let (Some(s), Some(u)) = (q.since_ms, q.until_ms)
            && u < s
        {
            return Err(NodeError::BadInput(format!(
                "{} is before {}",
                label("until"),
                label("since")
            )));
        }
        Ok(q)
    }
}

/// A new memory as strings. As JSON (`memory_add`): `content`, `type`,
/// `share`, `tags`, `importance`, `pin`, `expires`; unknown fields are
/// refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddRequest {
    /// The text.
    pub content: String,
    /// The memory type (`type` in JSON; default `note`).
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Scopes to share with (`team:T`, `project:P`, `agent:A`, `global`).
    #[serde(default)]
    pub share: Vec<String>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Importance (default 0.5).
    pub importance: Option<f32>,
    /// Pin it.
    #[serde(default)]
    pub pin: bool,
    /// A duration from now (`30d`, `12h`) or an RFC 3339 time.
    pub expires: Option<String>,
    /// When the content became true (default: its creation).
    pub valid_from: Option<String>,
    /// When it stopped being true.
    pub valid_to: Option<String>,
    /// The id of the memory this one replaces.
    pub supersedes: Option<String>,
}

impl AddRequest {
    /// The memory this asks for, at `now_ms`. A bad field is `BadInput`
    /// naming it as the front end calls it (`label("expires")` is
    /// `--expires` on the command line, `expires` in MCP).
    pub fn memory(self, now_ms: u64, label: impl Fn(&str) -> String) -> Result<NewMemory> {
        self.memory_with(now_ms, label, |s| {
            s.parse::<Scope>().map_err(NodeError::from)
        })
    }

    /// [`AddRequest::memory`] with each scope read by `scope` (the CLI's
    /// is `Node::resolve_scope`, which also takes a qualifier's prefix,
    /// `team:zeus@3f2a`).
    pub fn memory_with(
        self,
        now_ms: u64,
        label: impl Fn(&str) -> String,
        scope: impl Fn(&str) -> Result<Scope>,
    ) -> Result<NewMemory> {
        let mut new = NewMemory::new(self.content);
        if let Some(k) = self.kind {
            new.kind = MemoryType::parse(&k)?;
        }
        new.share = self.share.iter().map(|s| scope(s)).collect::<Result<_>>()?;
        new.tags = self.tags;
        if let Some(i) = self.importance {
            new.importance = i;
        }
        new.pinned = self.pin;
        new.expires_ms = self
            .expires
            .map(|e| {
                let ms = parse_expiry_unbounded(&e, now_ms).map_err(|_| {
                    NodeError::BadInput(format!(
                        "malformed {} {e:?}: an expiry is a lifetime (30d, 12h) or an RFC 3339 time",
                        label("expires")
                    ))
                })?;
                within_bound(ms, &label("expires"), &e)
            })
            .transpose()?;
        new.validity = validity(
            self.valid_from.as_deref(),
            self.valid_to.as_deref(),
            now_ms,
            &label,
        )?;
        new.supersedes = self
            .supersedes
            .map(|s| {
                s.parse::<MemoryId>().map_err(|_| {
                    NodeError::BadInput(format!(
                        "malformed {} {s:?}: not a memory id",
                        label("supersedes")
                    ))
                })
            })
            .transpose()?;
        Ok(new)
    }
}

/// A recall mode as a front end takes it (`hybrid`, `lexical`, `semantic`,
/// `fast`; none: the default), for MCP, the JSON API and Python alike.
pub fn recall_mode(mode: Option<&str>) -> Result<RecallMode> {
    match mode {
        None => Ok(RecallMode::default()),
        Some(m) => RecallMode::parse(m).ok_or_else(|| {
            NodeError::BadInput(format!(
                "mode must be hybrid, lexical, semantic or fast, not {m:?}"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_become_the_memory_and_bad_ones_name_themselves() {
        let r = AddRequest {
            content: "deploy on fridays".into(),
            kind: Some("procedure".into()),
            share: vec!["team:apollo".into()],
            tags: vec!["ops".into()],
            importance: Some(0.9),
            pin: true,
            expires: Some("1h".into()),
            valid_from: Some("2026-03-01".into()),
            ..AddRequest::default()
        };
        let m = r.memory(1_000, |f| format!("--{f}")).unwrap();
        assert_eq!(m.kind.as_str(), "procedure");
        assert_eq!(m.share.len(), 1);
        assert_eq!(m.expires_ms, Some(1_000 + 3_600_000));
        assert!(m.pinned);
        assert_eq!(m.validity.from_ms, Some(1_772_323_200_000));
        let bad = AddRequest {
            content: "x".into(),
            valid_from: Some("2026-03-02".into()),
            valid_to: Some("2026-03-01".into()),
            ..AddRequest::default()
        };
        assert_eq!(bad.memory(0, str::to_owned).unwrap_err().exit_code(), 2);
        let bad = AddRequest {
            content: "x".into(),
            valid_to: Some("last tuesday".into()),
            ..AddRequest::default()
        };
        let e = bad.memory(0, |f| format!("--{f}")).unwrap_err().to_string();
        assert!(e.contains("--valid-to \"last tuesday\""), "{e}");
        let bad = AddRequest {
            content: "x".into(),
            valid_to: Some("7d".into()),
            ..AddRequest::default()
        };
        let e = bad.memory(0, |f| format!("--{f}")).unwrap_err().to_string();
        assert_eq!(
            e,
            "--valid-to 7d: a time is needed; did you mean +7d (7 days from now)?"
        );
        let bad = AddRequest {
            content: "x".into(),
            expires: Some("soon".into()),
            ..AddRequest::default()
        };
        let e = bad.memory(0, |f| format!("--{f}")).unwrap_err().to_string();
        assert!(e.contains("--expires \"soon\""), "{e}");
        let bad = AddRequest {
            content: "x".into(),
            share: vec!["teem:x".into()],
            ..AddRequest::default()
        };
        assert_eq!(bad.memory(0, str::to_owned).unwrap_err().exit_code(), 2);
    }

    /// Every time filter takes the one rule: a bare duration is refused
    /// with the sign meant, named as the front end names the field.
    #[test]
    fn a_bare_duration_is_no_time_for_any_filter() {
        let day = 86_400_000;
        let at = |field: &str, v: &str| {
            let v = Some(v.to_owned());
            let r = match field {
                "since" => TimeRequest {
                    since: v,
                    ..TimeRequest::default()
                },
                "until" => TimeRequest {
                    until: v,
                    ..TimeRequest::default()
                },
                "valid-at" => TimeRequest {
                    valid_at: v,
                    ..TimeRequest::default()
                },
                _ => TimeRequest {
                    known_at: v,
                    ..TimeRequest::default()
                },
            };
            r.query(8 * day, |f| format!("--{f}"))
        };
        for field in ["since", "until", "valid-at", "known-at"] {
            let e = at(field, "7d").unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert_eq!(
                e.to_string(),
                format!("--{field} 7d: a time is needed; did you mean -7d (7 days ago)?")
            );
            assert!(at(field, "-7d").is_ok(), "{field}");
            assert!(at(field, "+7d").is_ok(), "{field}");
        }
    }
}
