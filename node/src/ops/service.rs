//! `amos service install`: the systemd units of `deploy/systemd/`, rendered
//! for this machine, written and enabled.
//!
//! The shipped files are the only template source (compiled in with
//! `include_str!`): they name the default binary `/usr/local/bin/amos` and
//! home `/var/lib/amos`, and rendering swaps in the real ones. User units
//! (`--user`) leave out the block marked "system units only" (the dedicated
//! user and the sandboxing that needs a system manager) and install into
//! `default.target`.
//!
//! Planning ([`plan`]) is pure apart from reading the environment; only
//! [`apply`] writes files and runs commands. It must never write or run
//! anything for a dry run, and never put a path into a unit that systemd
//! would read differently (whitespace, quotes, `%` specifiers, `$`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::error::{NodeError, Result};

/// `deploy/systemd/amos.service`: `amos serve`.
pub const SERVE_UNIT: &str = include_str!("../../../deploy/systemd/amos.service");
/// `deploy/systemd/amos-sync.service`: `amos sync auto`, once.
pub const SYNC_UNIT: &str = include_str!("../../../deploy/systemd/amos-sync.service");
/// `deploy/systemd/amos-sync.timer`: starts `amos-sync.service` periodically.
pub const SYNC_TIMER: &str = include_str!("../../../deploy/systemd/amos-sync.timer");

/// The binary the shipped templates name.
pub const TEMPLATE_BIN: &str = "/usr/local/bin/amos";
/// The home the shipped templates name (and the system units' default).
pub const TEMPLATE_HOME: &str = "/var/lib/amos";
/// The dedicated system user.
pub const SERVICE_USER: &str = "amos";

const SYSTEM_ONLY_BEGIN: &str = "# -- system units only";
const SYSTEM_ONLY_END: &str = "# -- end system units only";

/// Which systemd manager the units are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnitMode {
    /// `/etc/systemd/system`, run as the dedicated user `amos`.
    System,
    /// `~/.config/systemd/user`, run as the invoking user.
    User,
}

/// What `amos service install` was asked to do.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// System or user units.
    pub mode: UnitMode,
    /// The node home the units use (absolute).
    pub home: PathBuf,
    /// The `amos` binary the units run (absolute).
    pub bin: PathBuf,
    /// Enable `amos-sync.timer` (sync-only node) instead of `amos.service`.
    pub timer: bool,
}

/// One unit file to write.
#[derive(Debug, Clone, Serialize)]
pub struct UnitFile {
    /// Where it is written.
    pub path: String,
    /// The unit, rendered.
    pub contents: String,
}

/// Everything an install does, in order: the files, then the commands.
#[derive(Debug, Clone, Serialize)]
pub struct InstallPlan {
    /// System or user units.
    pub mode: UnitMode,
    /// The home the units run `amos` on.
    pub home: String,
    /// The `amos` binary they run.
    pub bin: String,
    /// The unit that is enabled and started.
    pub enable: String,
    /// The unit files.
    pub files: Vec<UnitFile>,
    /// Each command as argv.
    pub commands: Vec<Vec<String>>,
    /// Things the operator should know (not errors).
    pub notes: Vec<String>,
}

/// Render one shipped template for `mode` with `bin` and `home`.
pub fn render(template: &str, mode: UnitMode, bin: &Path, home: &Path) -> Result<String> {
    let bin = unit_path(bin, "binary")?;
    let home = unit_path(home, "home")?;
    let mut out = String::with_capacity(template.len() + 128);
    let mut skipping = false;
    for line in template.lines() {
        if line.starts_with(SYSTEM_ONLY_BEGIN) {
            skipping = mode == UnitMode::User;
            if skipping {
                continue;
            }
        }
        if line.starts_with(SYSTEM_ONLY_END) {
            let was = skipping;
            skipping = false;
            if was {
                continue;
            }
        }
        if skipping {
            continue;
        }
        let line = if mode == UnitMode::User && line == "WantedBy=multi-user.target" {
            "WantedBy=default.target"
        } else {
            line
        };
        // One pass over both names, so neither replacement can touch the other.
        let mut rest = line;
        while !rest.is_empty() {
            let next = [(TEMPLATE_BIN, bin), (TEMPLATE_HOME, home)]
                .into_iter()
                .filter_map(|(from, to)| rest.find(from).map(|at| (at, from, to)))
                .min_by_key(|(at, _, _)| *at);
            match next {
                Some((at, from, to)) => {
                    out.push_str(&rest[..at]);
                    out.push_str(to);
                    rest = &rest[at + from.len()..];
                }
                None => {
                    out.push_str(rest);
                    rest = "";
                }
            }
        }
        out.push('\n');
    }
    if skipping {
        return Err(NodeError::Corrupt(
            "a unit template opens a system-only block it never closes".into(),
        ));
    }
    Ok(out)
}

/// A path systemd reads back exactly as written: absolute UTF-8 without
/// whitespace, quotes, backslashes, `%` specifiers or `$` expansions.
fn unit_path<'a>(p: &'a Path, what: &str) -> Result<&'a str> {
    let s = p
        .to_str()
        .ok_or_else(|| NodeError::BadInput(format!("the {what} path is not UTF-8")))?;
    if !p.is_absolute() {
        return Err(NodeError::BadInput(format!(
            "the {what} path {s:?} is not absolute"
        )));
    }
    if let Some(c) = s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "\"'\\%$;".contains(*c))
    {
        return Err(NodeError::BadInput(format!(
            "the {what} path {s:?} holds {c:?}, which a unit file would read differently: \
             choose another path"
        )));
    }
    Ok(s)
}

/// Where unit files go for `mode`.
pub fn unit_dir(mode: UnitMode) -> Result<PathBuf> {
    match mode {
        UnitMode::System => Ok(PathBuf::from("/etc/systemd/system")),
        UnitMode::User => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
                .ok_or_else(|| {
                    NodeError::BadInput(
                        "neither XDG_CONFIG_HOME nor HOME is set: cannot find the user unit directory"
                            .into(),
                    )
                })?;
            Ok(config.join("systemd").join("user"))
        }
    }
}

/// Work out the files and commands of an install. Reads the environment
/// (unit directory, whether the user `amos` exists); changes nothing.
pub fn plan(opts: &InstallOptions) -> Result<InstallPlan> {
    let dir = unit_dir(opts.mode)?;
    let mut files = Vec::new();
    for (name, template) in [
        ("amos.service", SERVE_UNIT),
        ("amos-sync.service", SYNC_UNIT),
        ("amos-sync.timer", SYNC_TIMER),
    ] {
        files.push(UnitFile {
            path: dir.join(name).display().to_string(),
            contents: render(template, opts.mode, &opts.bin, &opts.home)?,
        });
    }
    let enable = if opts.timer {
        "amos-sync.timer"
    } else {
        "amos.service"
    };
    let home = unit_path(&opts.home, "home")?.to_owned();
    let bin = unit_path(&opts.bin, "binary")?.to_owned();
    let argv = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let mut commands = Vec::new();
    let mut notes = Vec::new();
    match opts.mode {
        UnitMode::System => {
            if !user_exists(SERVICE_USER) {
                commands.push(argv(&[
                    "useradd",
                    "--system",
                    "--user-group",
                    "--home-dir",
                    &home,
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    SERVICE_USER,
                ]));
            }
            commands.push(argv(&[
                "install",
                "-d",
                "-m",
                "0700",
                "-o",
                SERVICE_USER,
                "-g",
                SERVICE_USER,
                &home,
            ]));
            commands.push(argv(&["systemctl", "daemon-reload"]));
            commands.push(argv(&["systemctl", "enable", "--now", enable]));
            if bin.starts_with("/root/") || bin.starts_with("/home/") {
                notes.push(format!(
                    "the units run {bin}, which the user {SERVICE_USER} may not be able to \
                     execute: install the binary to {TEMPLATE_BIN} and pass --bin {TEMPLATE_BIN}"
                ));
            }
        }
        UnitMode::User => {
            commands.push(argv(&["systemctl", "--user", "daemon-reload"]));
            commands.push(argv(&["systemctl", "--user", "enable", "--now", enable]));
            notes.push(
                "user units stop when you log out unless lingering is on: loginctl enable-linger"
                    .into(),
            );
        }
    }
    if !opts.timer {
        notes.push(
            "amos.service keeps mDNS discovery on; add --no-mdns to its ExecStart= where \
             multicast must not leave the host"
                .into(),
        );
    }
    Ok(InstallPlan {
        mode: opts.mode,
        home,
        bin,
        enable: enable.to_owned(),
        files,
        commands,
        notes,
    })
}

/// Whether a local account `name` exists (`/etc/passwd`; NSS-only accounts
/// are not seen, and `useradd` then reports that it exists).
fn user_exists(name: &str) -> bool {
    std::fs::read_to_string("/etc/passwd")
        .map(|p| {
            p.lines()
                .any(|l| l.split(':').next().is_some_and(|n| n == name))
        })
        .unwrap_or(false)
}

/// Carry out a plan: write the unit files (0644, atomically), then run the
/// commands in order, stopping at the first that fails.
pub fn apply(plan: &InstallPlan) -> Result<()> {
    for f in &plan.files {
        let path = Path::new(&f.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(NodeError::io(format!("creating {}", dir.display())))?;
        }
        crate::home::write_atomic(path, f.contents.as_bytes(), 0o644)?;
    }
    for argv in &plan.commands {
        let Some((prog, args)) = argv.split_first() else {
            continue;
        };
        let status = Command::new(prog)
            .args(args)
            .status()
            .map_err(NodeError::io(format!("running {}", argv.join(" "))))?;
        if !status.success() {
            return Err(NodeError::Failed(format!(
                "`{}` failed ({status}); the unit files are written, the rest was not done",
                argv.join(" ")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn the_shipped_files_render_to_themselves_with_the_default_paths() {
        for t in [SERVE_UNIT, SYNC_UNIT, SYNC_TIMER] {
            let r = render(t, UnitMode::System, &p(TEMPLATE_BIN), &p(TEMPLATE_HOME)).unwrap();
            assert_eq!(r, t);
        }
    }

    #[test]
    fn system_units_run_as_the_dedicated_user_in_a_sandbox_around_the_home() {
        let r = render(
            SERVE_UNIT,
            UnitMode::System,
            &p("/opt/amos/bin/amos"),
            &p("/srv/amos"),
        )
        .unwrap();
        for line in [
            "User=amos",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "PrivateTmp=yes",
            "ReadWritePaths=/srv/amos",
            "Environment=AMOS_HOME=/srv/amos",
            "ExecStart=/opt/amos/bin/amos serve --sync-every 5min",
            "Restart=on-failure",
            "WantedBy=multi-user.target",
        ] {
            assert!(r.lines().any(|l| l == line), "{line} in\n{r}");
        }
        assert!(
            !r.contains(TEMPLATE_BIN) && !r.contains(TEMPLATE_HOME),
            "{r}"
        );
    }

    #[test]
    fn user_units_leave_out_the_system_block() {
        let r = render(SERVE_UNIT, UnitMode::User, &p("/u/bin/amos"), &p("/u/h")).unwrap();
        assert!(!r.contains("User="), "{r}");
        assert!(!r.contains("ProtectSystem"), "{r}");
        assert!(!r.contains("system units only"), "{r}");
        assert!(r.lines().any(|l| l == "NoNewPrivileges=yes"), "{r}");
        assert!(r.lines().any(|l| l == "WantedBy=default.target"), "{r}");
        assert!(r.lines().any(|l| l == "Environment=AMOS_HOME=/u/h"), "{r}");
    }

    #[test]
    fn a_home_inside_the_binary_path_is_replaced_once() {
        // The binary's path contains the template home: one pass, no re-replacement.
        let r = render(
            SERVE_UNIT,
            UnitMode::System,
            &p("/var/lib/amos/bin/amos"),
            &p("/data"),
        )
        .unwrap();
        assert!(r.contains("ExecStart=/var/lib/amos/bin/amos serve"), "{r}");
        assert!(r.contains("ReadWritePaths=/data"), "{r}");
    }

    #[test]
    fn paths_a_unit_would_misread_are_refused() {
        for bad in [
            "relative/home",
            "/with space",
            "/pct%h",
            "/dollar$HOME",
            "/q\"x",
        ] {
            let e = render(SERVE_UNIT, UnitMode::System, &p(TEMPLATE_BIN), &p(bad));
            assert!(matches!(e, Err(NodeError::BadInput(_))), "{bad}: {e:?}");
        }
    }
}
