//! The long-running front ends: `serve` (the QUIC node, with push, metrics,
//! the console and the HTTP API beside it), `console`, `mcp`, and the systemd units that
//! run them (`service install`). Arguments in, the library runs them.

use std::path::{Path, PathBuf};

use amos_node::{Home, Node};
use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use super::bad;
use super::output::{Out, say};

#[derive(Subcommand, Debug)]
pub(super) enum ServingCmd {
    /// Run the node: QUIC listener, periodic sync; stops on SIGINT/SIGTERM
    Serve {
        /// UDP address to listen on
        #[arg(long, value_name = "ADDR", default_value = amos_node::net::DEFAULT_LISTEN)]
        listen: String,
        /// Also sync with every peer this often (e.g. 30s)
        #[arg(long, value_name = "DUR")]
        sync_every: Option<String>,
        /// Neither advertise nor browse over mDNS
        #[arg(long)]
        no_mdns: bool,
        /// Do not push changes to peers as they happen (periodic sync only)
        #[arg(long)]
        no_push: bool,
        /// Push a change to peers this long after it (e.g. 200ms)
        #[arg(long, value_name = "DUR", default_value = "200ms")]
        push_debounce: String,
        /// At most this many push sessions at once
        #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
        push_sessions: u16,
        /// Serve Prometheus /metrics and /healthz over HTTP on this TCP address
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
        #[command(flatten)]
        relay: Box<RelayArgs>,
        /// Also serve the web console on this TCP address (loopback unless --allow-remote)
        #[arg(long, value_name = "ADDR")]
        console: Option<String>,
        /// Also serve the JSON API (/v1) and MCP over HTTP (/mcp) on this TCP
        /// address, for agents with a token (loopback unless --allow-remote)
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// Let --console and --http listen on a non-loopback address (prints a warning)
        #[arg(long)]
        allow_remote: bool,
        #[command(flatten)]
        dial: super::mesh::DialArgs,
    },
    /// The web console: node, peers, memories, org and audit in a browser
    Console {
        /// TCP address to listen on (loopback unless --allow-remote)
        #[arg(long, value_name = "ADDR", default_value = amos_node::front::console::DEFAULT_LISTEN)]
        listen: String,
        /// Print the console's URL with its access token and exit
        #[arg(long)]
        print_url: bool,
        /// Let --listen be a non-loopback address (prints a warning)
        #[arg(long)]
        allow_remote: bool,
        #[command(flatten)]
        dial: super::mesh::DialArgs,
    },
    /// MCP server on stdio for one agent ($AMOS_AGENT): memory tools for AI agents
    Mcp,
    /// systemd units: amos.service (serve), amos-sync.service + .timer (sync auto)
    #[command(subcommand)]
    Service(ServiceCmd),
}

/// What `amos serve` allows as a relay (docs/design.md §7.11, §8.2).
#[derive(clap::Args, Debug)]
pub(super) struct RelayArgs {
    /// As a relay: bytes per second each relay peer may send (e.g. 8M)
    #[arg(long, value_name = "BYTES", default_value = "32M")]
    relay_rate: String,
    /// As a relay: bytes each relay peer may send per hour; past them
    /// its pipes are cut until the hour ends (e.g. 4G)
    #[arg(long, value_name = "BYTES", default_value = "4G")]
    relay_quota: String,
    /// As a relay: bytes of sealed mailbox bundles held for each relay
    /// peer (from all its senders); a post past them is refused
    #[arg(long, value_name = "BYTES", default_value = "256M")]
    mailbox_quota: String,
    /// As a relay: bytes of sealed mailbox bundles held from each relay
    /// peer (for all its recipients); a post past them is refused
    #[arg(long, value_name = "BYTES", default_value = "256M")]
    mailbox_sender_quota: String,
    /// As a relay: a held mailbox bundle not taken by then is deleted
    /// (e.g. 14d, 12h; 0s deletes everything held at start)
    #[arg(long, value_name = "DUR", default_value = "14d")]
    mailbox_expiry: String,
}

#[derive(Subcommand, Debug)]
pub(super) enum ServiceCmd {
    /// Write the units and enable amos.service (or, with --timer, amos-sync.timer)
    Install {
        /// User units in ~/.config/systemd/user, run as you (default: system
        /// units in /etc/systemd/system, run as the user `amos`, home /var/lib/amos)
        #[arg(long)]
        user: bool,
        /// Print the files and the commands; change nothing
        #[arg(long)]
        dry_run: bool,
        /// Enable the sync timer instead of the serving node
        #[arg(long)]
        timer: bool,
        /// The binary the units run [default: this one]
        #[arg(long, value_name = "PATH")]
        bin: Option<PathBuf>,
    },
}

/// Run one of this group's commands. `home_flag` is `--home` as given
/// (`service install` picks its own default).
pub(super) fn run(home: &Home, home_flag: Option<&Path>, out: &Out, cmd: ServingCmd) -> Result<()> {
    match cmd {
        ServingCmd::Serve {
            listen,
            sync_every,
            no_mdns,
            no_push,
            push_debounce,
            push_sessions,
            metrics,
            relay,
            console,
            http,
            allow_remote,
            dial,
        } => {
            dial.apply()?;
            let size = |flag: &str, v: &str| {
                amos_node::net::relay::parse_size(v)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        bad(format!(
                            "malformed {flag} {v:?}: use bytes, e.g. 512K, 8M, 4G"
                        ))
                    })
            };
            let RelayArgs {
                relay_rate,
                relay_quota,
                mailbox_quota,
                mailbox_sender_quota,
                mailbox_expiry,
            } = *relay;
            let relay_limits = amos_node::net::relay::Limits {
                rate: size("--relay-rate", &relay_rate)?,
                quota: size("--relay-quota", &relay_quota)?,
                held: amos_node::net::relay::HeldLimits {
                    per_recipient: size("--mailbox-quota", &mailbox_quota)?,
                    per_sender: size("--mailbox-sender-quota", &mailbox_sender_quota)?,
                    expiry: humantime::parse_duration(&mailbox_expiry).map_err(|_| {
                        bad(format!(
                            "malformed --mailbox-expiry {mailbox_expiry:?}: use e.g. 14d, 12h"
                        ))
                    })?,
                },
                ..Default::default()
            };
            if allow_remote && console.is_none() && http.is_none() {
                return Err(bad("--allow-remote goes with --console or --http"));
            }
            let push_debounce = humantime::parse_duration(&push_debounce).map_err(|_| {
                bad(format!(
                    "malformed --push-debounce {push_debounce:?}: use e.g. 200ms"
                ))
            })?;
            let push = (!no_push).then(|| amos_node::net::PushConfig {
                debounce_ms: push_debounce.as_millis() as u64,
                max_sessions: usize::from(push_sessions),
                ..Default::default()
            });
            let metrics = metrics
                .map(|m| {
                    m.parse()
                        .map_err(|_| bad(format!("malformed --metrics {m:?}: use IP:PORT")))
                })
                .transpose()?;
            let listen = listen
                .parse()
                .map_err(|_| bad(format!("malformed --listen {listen:?}: use IP:PORT")))?;
            let sync_every = sync_every
                .map(|d| {
                    humantime::parse_duration(&d)
                        .ok()
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| bad(format!("malformed --sync-every {d:?}: use e.g. 30s")))
                })
                .transpose()?;
            let console = console
                .map(|c| console_addr(&c, "--console", allow_remote))
                .transpose()?;
            let http = http
                .map(|h| {
                    let opts = amos_node::front::http::HttpOptions {
                        listen: h
                            .parse()
                            .map_err(|_| bad(format!("malformed --http {h:?}: use IP:PORT")))?,
                        allow_remote,
                    };
                    amos_node::front::http::check_listen(&opts)?;
                    Ok::<_, anyhow::Error>(opts)
                })
                .transpose()?;
            let mut console_at = None;
            // Validates the home (exit 2 if it is not one).
            drop(Node::open(home)?);
            let http_at = match http {
                Some(opts) => Some(amos_node::front::http::start(home, opts)?.addr),
                None => None,
            };
            if let Some(opts) = console {
                let opts = amos_node::front::console::ConsoleOptions {
                    serving: Some(amos_node::front::console::Serving { listen, metrics }),
                    ..opts
                };
                let c = amos_node::front::console::start(home, opts)?;
                // Always printed (also with -q): the operator needs it to get in.
                if out.json {
                    say(&json!({"console": c.url}).to_string());
                } else {
                    say(&format!("console: {}", c.url));
                }
                console_at = Some(c.addr);
            }
            amos_node::ops::serve(
                home,
                &amos_node::ops::ServeOptions {
                    listen,
                    sync_every,
                    mdns: !no_mdns,
                    metrics,
                    push,
                    relay_limits,
                },
                |s| {
                    let console = console_at.map(|a| format!("http://{a}/"));
                    let http = http_at.map(|a| format!("http://{a}"));
                    let mut v = serde_json::to_value(s).unwrap_or_default();
                    v["console"] = json!(console);
                    v["http"] = json!(http);
                    out.emit(&json!({ "serving": v }), || {
                        started_line(s, console.as_deref(), http.as_deref())
                    });
                },
            )?;
            out.emit(&json!({"stopped": true}), || "stopped".into());
            Ok(())
        }
        ServingCmd::Console {
            listen,
            print_url,
            allow_remote,
            dial,
        } => {
            dial.apply()?;
            console_cmd(home, out, &listen, print_url, allow_remote)
        }
        ServingCmd::Mcp => {
            let agent = std::env::var("AMOS_AGENT")
                .ok()
                .filter(|a| !a.trim().is_empty());
            let Some(agent) = agent else {
                return Err(bad(
                    "amos mcp needs the agent it serves: set AMOS_AGENT (e.g. AMOS_AGENT=alice amos mcp)",
                ));
            };
            amos_node::front::mcp::serve_stdio(home, agent.trim())?;
            Ok(())
        }
        ServingCmd::Service(cmd) => service_cmd(home_flag, out, cmd),
    }
}

/// `amos service install`: render the units, print them for a dry run,
/// otherwise write and enable them.
fn service_cmd(home: Option<&std::path::Path>, out: &Out, cmd: ServiceCmd) -> Result<()> {
    use amos_node::ops::service::{self, InstallOptions, UnitMode};
    let ServiceCmd::Install {
        user,
        dry_run,
        timer,
        bin,
    } = cmd;
    let mode = if user {
        UnitMode::User
    } else {
        UnitMode::System
    };
    let home = match home {
        Some(h) => h.to_path_buf(),
        None if user => Home::default_root(),
        None => PathBuf::from(service::TEMPLATE_HOME),
    };
    let absolute = |p: PathBuf, what: &str| {
        std::path::absolute(&p).map_err(|e| {
            bad(format!(
                "cannot make the {what} path {} absolute: {e}",
                p.display()
            ))
        })
    };
    let bin = match bin {
        Some(b) => b,
        None => std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find this binary's path: {e}"))?,
    };
    let plan = service::plan(&InstallOptions {
        mode,
        home: absolute(home, "home")?,
        bin: absolute(bin, "binary")?,
        timer,
    })?;
    if !dry_run {
        service::apply(&plan)?;
    }
    let mut v = serde_json::to_value(&plan)?;
    v["dry_run"] = json!(dry_run);
    out.emit(&v, || {
        let mut s = Vec::new();
        for f in &plan.files {
            if dry_run {
                s.push(format!("==> {} (would write)\n{}", f.path, f.contents));
            } else {
                s.push(format!("wrote {}", f.path));
            }
        }
        for c in &plan.commands {
            s.push(format!(
                "{}{}",
                if dry_run { "would run: " } else { "ran: " },
                c.join(" ")
            ));
        }
        for n in &plan.notes {
            s.push(format!("note: {n}"));
        }
        s.join("\n")
    });
    Ok(())
}

/// `amos serve`'s start line: what it listens on, as whom, and what runs
/// beside it.
fn started_line(s: &amos_node::ops::Started, console: Option<&str>, http: Option<&str>) -> String {
    let mut line = format!(
        "serving node {} on {} (QUIC); push {}",
        s.node_id,
        s.listen,
        if s.push { "on" } else { "off" }
    );
    if let Some(ms) = s.sync_every_ms {
        line.push_str(&format!(
            "; sync every {}",
            humantime::format_duration(std::time::Duration::from_millis(ms))
        ));
    }
    line.push_str(&format!("; mDNS {}", if s.mdns { "on" } else { "off" }));
    if let Some(c) = console {
        line.push_str(&format!("; console {c}"));
    }
    if let Some(h) = http {
        line.push_str(&format!("; http {h}/v1 and {h}/mcp"));
    }
    if let Some(m) = s.metrics {
        line.push_str(&format!("; metrics http://{m}/metrics"));
    }
    line
}

/// A console address from the command line.
fn console_addr(
    text: &str,
    flag: &str,
    allow_remote: bool,
) -> Result<amos_node::front::console::ConsoleOptions> {
    let listen = text
        .parse()
        .map_err(|_| bad(format!("malformed {flag} {text:?}: use IP:PORT")))?;
    let opts = amos_node::front::console::ConsoleOptions {
        listen,
        allow_remote,
        serving: None,
    };
    amos_node::front::console::check_listen(&opts)?;
    Ok(opts)
}

/// `amos console [--listen ADDR] [--print-url]`: print the URL (with the
/// access token), then serve until SIGINT/SIGTERM unless only asked for it.
fn console_cmd(
    home: &Home,
    out: &Out,
    listen: &str,
    print_url: bool,
    allow_remote: bool,
) -> Result<()> {
    let opts = console_addr(listen, "--listen", allow_remote)?;
    // Validates the home (exit 2 if it is not one).
    drop(Node::open(home)?);
    if print_url {
        let token = amos_node::front::console::ensure_token(home)?;
        let url = amos_node::front::console::url(opts.listen, &token);
        out.emit(&json!({"url": url}), || url.clone());
        return Ok(());
    }
    amos_node::front::console::run(home, &opts, |url| {
        // Always printed (also with -q): the operator needs it to get in.
        if out.json {
            say(&json!({"url": url}).to_string());
        } else {
            say(url);
        }
    })?;
    Ok(())
}
