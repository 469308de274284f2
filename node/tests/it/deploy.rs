//! deploy/: the systemd units `amos service install` renders pass
//! `systemd-analyze verify` (system and user units), `--dry-run` writes
//! nothing, and — where a Docker engine answers — `deploy/mesh-test.sh`
//! runs three containerised nodes through pairing, a partition and a heal.
//!
//! Missing tools are not failures here: each such test prints a loud
//! SKIPPED to stderr and returns.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn skipped(test: &str, why: &str) {
    eprintln!("\n**************** SKIPPED {test}: {why} ****************\n");
}

/// `amos --json service install ARGS --dry-run` with HOME and
/// XDG_CONFIG_HOME inside `sandbox`.
fn dry_run(sandbox: &Path, args: &[&str]) -> Value {
    let out = Command::new(crate::common::amos_bin())
        .args(["--json", "service", "install", "--dry-run"])
        .args(args)
        .env("HOME", sandbox.join("home"))
        .env("XDG_CONFIG_HOME", sandbox.join("config"))
        .env_remove("AMOS_HOME")
        .stdin(Stdio::null())
        .output()
        .expect("spawn amos");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("JSON plan")
}

fn files(plan: &Value) -> Vec<(String, String)> {
    plan["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().expect("path").to_owned(),
                f["contents"].as_str().expect("contents").to_owned(),
            )
        })
        .collect()
}

/// Every file below `dir`, recursively.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            out.push(p.clone());
            if p.is_dir() {
                out.extend(tree(&p));
            }
        }
    }
    out
}

#[test]
fn rendered_units_pass_systemd_analyze_verify() {
    let analyze = Path::new("/usr/bin/systemd-analyze");
    if !analyze.exists() {
        skipped(
            "rendered_units_pass_systemd_analyze_verify",
            "/usr/bin/systemd-analyze is not installed (apt-get install systemd)",
        );
        return;
    }
    let sandbox = tempfile::tempdir().expect("tempdir");
    let runtime = sandbox.path().join("runtime");
    std::fs::create_dir_all(&runtime).expect("runtime dir");
    let node_home = sandbox.path().join("node-home");
    for (mode, extra) in [("system", &[][..]), ("user", &["--user"][..])] {
        for timer in [false, true] {
            let mut args = vec!["--home", node_home.to_str().expect("utf-8")];
            args.extend_from_slice(extra);
            if timer {
                args.push("--timer");
            }
            let plan = dry_run(sandbox.path(), &args);
            assert_eq!(plan["dry_run"], true);
            assert_eq!(plan["mode"], mode);
            let enabled = if timer {
                "amos-sync.timer"
            } else {
                "amos.service"
            };
            assert_eq!(plan["enable"], enabled);
            let enable_cmd = plan["commands"]
                .as_array()
                .expect("commands")
                .last()
                .expect("a command")
                .clone();
            assert_eq!(
                enable_cmd.as_array().expect("argv").last().expect("unit"),
                enabled
            );

            let dir = sandbox.path().join(format!("verify-{mode}-{timer}"));
            std::fs::create_dir_all(&dir).expect("dir");
            let mut paths = Vec::new();
            for (path, contents) in files(&plan) {
                let name = Path::new(&path).file_name().expect("file name");
                if path.ends_with(".service") {
                    assert!(
                        contents.contains(&format!("AMOS_HOME={}", node_home.display())),
                        "{path}: {contents}"
                    );
                }
                let p = dir.join(name);
                std::fs::write(&p, contents).expect("write unit");
                paths.push(p);
            }
            assert_eq!(paths.len(), 3);
            let mut cmd = Command::new(analyze);
            if mode == "user" {
                cmd.arg("--user").env("XDG_RUNTIME_DIR", &runtime);
            }
            let out = cmd
                .arg("verify")
                .args(&paths)
                .output()
                .expect("systemd-analyze");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{mode}: {out:?}");
            // verify exits 0 on unknown keys and the like: any word about our
            // units is a failure.
            let complaints: Vec<&str> = stderr
                .lines()
                .filter(|l| l.contains("amos") || l.contains(&*dir.to_string_lossy()))
                .collect();
            assert!(complaints.is_empty(), "{mode}: {complaints:#?}");
        }
    }
}

#[test]
fn a_dry_run_writes_nothing_and_says_what_it_would_do() {
    let sandbox = tempfile::tempdir().expect("tempdir");
    let node_home = sandbox.path().join("node");
    let plan = dry_run(
        sandbox.path(),
        &["--user", "--home", node_home.to_str().expect("utf-8")],
    );
    assert!(
        tree(sandbox.path()).is_empty(),
        "a dry run created {:?}",
        tree(sandbox.path())
    );
    let unit_dir = sandbox.path().join("config/systemd/user");
    let paths: Vec<String> = files(&plan).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        ["amos.service", "amos-sync.service", "amos-sync.timer"]
            .map(|n| unit_dir.join(n).display().to_string())
    );
    assert_eq!(
        plan["commands"],
        serde_json::json!([
            ["systemctl", "--user", "daemon-reload"],
            ["systemctl", "--user", "enable", "--now", "amos.service"]
        ])
    );

    // The text form shows the files and the commands.
    let out = Command::new(crate::common::amos_bin())
        .args(["service", "install", "--dry-run", "--timer"])
        .arg("--home")
        .arg(&node_home)
        .env("HOME", sandbox.path().join("home"))
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::null())
        .output()
        .expect("spawn amos");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("==> /etc/systemd/system/amos.service (would write)"),
        "{text}"
    );
    assert!(
        text.contains("would run: systemctl enable --now amos-sync.timer"),
        "{text}"
    );
    assert!(text.contains("User=amos"), "{text}");
    assert!(
        tree(sandbox.path()).is_empty(),
        "{:?}",
        tree(sandbox.path())
    );

    // A home systemd would read differently is bad input, before anything happens.
    let out = Command::new(crate::common::amos_bin())
        .args([
            "service",
            "install",
            "--dry-run",
            "--user",
            "--home",
            "/srv/my amos",
        ])
        .env("HOME", sandbox.path().join("home"))
        .stdin(Stdio::null())
        .output()
        .expect("spawn amos");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(tree(sandbox.path()).is_empty());
}

/// Whether a Docker engine answers `docker info`.
fn docker_answers() -> bool {
    Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn three_containers_pair_partition_heal_and_agree() {
    let test = "three_containers_pair_partition_heal_and_agree";
    match std::env::var("AMOS_DOCKER_TESTS").as_deref() {
        Ok("0") => {
            skipped(test, "AMOS_DOCKER_TESTS=0");
            return;
        }
        Ok("1") => {}
        _ if docker_answers() => {}
        _ => {
            skipped(
                test,
                "no Docker engine answers `docker info` (set AMOS_DOCKER_TESTS=1 to insist)",
            );
            return;
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/mesh-test.sh");
    // The binary these tests built goes into the image (with its shared
    // libraries): no second build. `deploy/mesh-test.sh` alone builds the
    // static release binary instead.
    let out = Command::new("bash")
        .arg(&script)
        .env("AMOS_BIN", crate::common::amos_bin())
        .stdin(Stdio::null())
        .output()
        .expect("run deploy/mesh-test.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mesh-test.sh failed ({:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(stdout.contains("mesh-test: PASS"), "{stdout}\n{stderr}");
}
