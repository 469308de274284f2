//! What a node recorded about others: the facts it refused from peers, the
//! reads of its memories (the read audit), and the read audit's local settings.

use amos_node::Node;
use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::bad;
use super::output::{Out, rfc3339};

#[derive(Subcommand, Debug)]
pub(super) enum AuditingCmd {
    /// Facts refused from peers, newest first (`amos audit reads`: the read audit)
    Audit {
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[command(subcommand)]
        what: Option<AuditCmd>,
    },
    /// Local settings of this node (never replicated): read-audit, read-audit-retention, encoder
    #[command(subcommand)]
    Config(ConfigCmd),
}

#[derive(Subcommand, Debug)]
pub(super) enum AuditCmd {
    /// Which agent read which memory, when, through which front end (newest first)
    Reads {
        #[arg(long, value_name = "AGENT")]
        agent: Option<String>,
        #[arg(long, value_name = "ID")]
        memory: Option<String>,
        /// Only reads since then: a time (-1h, 2026-03-01, an RFC 3339 time)
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        since: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum ConfigCmd {
    /// read-audit on|off, read-audit-retention DUR (e.g. 30d), or encoder on|off (the sentence encoder's vectors; off: hybrid recall uses the static model, as --mode fast)
    Set { key: String, value: String },
    /// The local settings
    Show,
}

/// Run one of this group's commands on an open node.
pub(super) fn run(node: &mut Node, out: &Out, cmd: AuditingCmd) -> Result<()> {
    match cmd {
        AuditingCmd::Config(ConfigCmd::Set { key, value }) => {
            let c = match key.as_str() {
                "read-audit" => match value.as_str() {
                    "on" => node.set_read_audit(true)?,
                    "off" => node.set_read_audit(false)?,
                    v => return Err(bad(format!("read-audit is on or off, not {v:?}"))),
                },
                "read-audit-retention" => {
                    let d = humantime::parse_duration(&value).map_err(|_| {
                        bad(format!(
                            "malformed retention {value:?}: use a duration, e.g. 30d"
                        ))
                    })?;
                    node.set_read_audit_retention(d.as_millis() as u64)?
                }
                "encoder" => {
                    match value.as_str() {
                        "on" => node.set_encoder_enabled(true)?,
                        "off" => node.set_encoder_enabled(false)?,
                        v => return Err(bad(format!("encoder is on or off, not {v:?}"))),
                    }
                    node.read_audit_config()?
                }
                k => {
                    return Err(bad(format!(
                        "unknown setting {k:?}: read-audit, read-audit-retention, encoder"
                    )));
                }
            };
            let c = Settings {
                read_audit: c,
                encoder: on_off(node.encoder_enabled()?),
            };
            out.emit(&c, || config_text(&c));
        }
        AuditingCmd::Config(ConfigCmd::Show) => {
            let c = Settings {
                read_audit: node.read_audit_config()?,
                encoder: on_off(node.encoder_enabled()?),
            };
            out.emit(&c, || config_text(&c));
        }
        AuditingCmd::Audit {
            what:
                Some(AuditCmd::Reads {
                    agent,
                    memory,
                    since,
                    limit,
                }),
            ..
        } => {
            // A time as every time flag takes it (a bare `1h` is refused).
            let since_ms = amos_node::front::TimeRequest {
                since,
                ..Default::default()
            }
            .query(node.now_ms(), |f| format!("--{f}"))?
            .since_ms;
            let rows = node.read_audit(agent.as_deref(), memory.as_deref(), since_ms, limit)?;
            if rows.is_empty() {
                let off = !node.read_audit_config()?.on;
                out.nothing(|| {
                    let mut line = "no reads recorded".to_owned();
                    if let Some(a) = &agent {
                        line.push_str(&format!(" by {a}"));
                    }
                    if let Some(m) = &memory {
                        line.push_str(&format!(" of {m}"));
                    }
                    if let Some(ms) = since_ms {
                        line.push_str(&format!(" since {}", rfc3339(ms)));
                    }
                    if off {
                        line.push_str(
                            "; the read audit is off here (amos config set read-audit on)",
                        );
                    }
                    line
                });
            }
            out.emit(&json!({ "reads": rows }), || {
                rows.iter()
                    .map(|r| {
                        format!(
                            "{}  {:<16} {}  {} via {}",
                            rfc3339(r.time_ms),
                            r.agent,
                            r.memory,
                            r.front,
                            r.via
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        AuditingCmd::Audit { limit, .. } => {
            let entries = node.audit(limit)?;
            if entries.is_empty() {
                out.nothing(|| "no facts refused from peers".to_owned());
            }
            out.emit(&json!({"refused": entries}), || {
                entries
                    .iter()
                    .map(|e| {
                        format!(
                            "{}  peer {}  {}  {}  {}",
                            rfc3339(e.time_ms),
                            &e.peer[..10.min(e.peer.len())],
                            e.code,
                            e.register,
                            e.reason
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
    }
    Ok(())
}

/// The local settings as `config show` prints them.
#[derive(serde::Serialize)]
struct Settings {
    #[serde(flatten)]
    read_audit: amos_node::api::ReadAuditConfig,
    /// `on` or `off`.
    encoder: &'static str,
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

fn config_text(s: &Settings) -> String {
    let c = &s.read_audit;
    format!(
        "read-audit {}{} (stored: {}), retention {}, encoder {}",
        if c.on { "on" } else { "off" },
        c.env
            .as_ref()
            .map(|e| format!(" by AMOS_READ_AUDIT={e}"))
            .unwrap_or_default(),
        if c.stored { "on" } else { "off" },
        humantime::format_duration(std::time::Duration::from_millis(c.retention_ms)),
        s.encoder
    )
}
