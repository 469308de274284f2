//! A running `amos serve` for multi-process tests: started on a given
//! address (optionally inside a network namespace the test made), ready
//! once it logs "listening on", stopped with SIGTERM on drop.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A free UDP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.local_addr().expect("addr").port()
}

/// `amos` with `home`, run directly or inside network namespace `netns`.
pub fn amos_in(netns: Option<&str>, home: &Path) -> Command {
    let mut c = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(super::amos_bin());
            c
        }
        None => Command::new(super::amos_bin()),
    };
    c.env("AMOS_HOME", home)
        .env_remove("AMOS_AGENT")
        .env("AMOS_LOG", "warn")
        .stdin(Stdio::null());
    c
}

pub struct Server {
    child: Option<Child>,
    /// The address it listens on, as given to `--listen`.
    pub addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// `amos serve --listen 127.0.0.1:<free port> --no-mdns`.
    pub fn start(home: &Path) -> Server {
        let addr = format!("127.0.0.1:{}", free_port());
        Server::start_with(home, None, &addr, &["--no-mdns"])
    }

    /// `amos serve --listen ADDR EXTRA...` (inside `netns` if given).
    pub fn start_with(home: &Path, netns: Option<&str>, addr: &str, extra: &[&str]) -> Server {
        Server::start_env(home, netns, addr, extra, &[])
    }

    /// [`Server::start_with`] with these environment variables set too.
    pub fn start_env(
        home: &Path,
        netns: Option<&str>,
        addr: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let mut child = amos_in(netns, home)
            .env("AMOS_LOG", "info")
            .envs(env.iter().copied())
            .args(["serve", "--listen", addr])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn amos serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if line.contains("listening on") {
                        let _ = tx.send(());
                    }
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let mut s = Server {
            child: Some(child),
            addr: addr.to_owned(),
            log,
        };
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let status = s.stop();
            panic!(
                "amos serve did not report listening ({status:?}): {}",
                s.log()
            );
        }
        s
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().expect("try_wait").is_none())
    }

    /// SIGTERM, then wait (bounded; SIGKILL as a last resort).
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// SIGKILL: the node vanishes without a goodbye (a partition).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A home's NodeId (`amos id`).
pub fn id(h: &super::Home) -> String {
    h.json(&["id"])["node_id"].as_str().expect("id").to_owned()
}

/// Register `a` and `b`, both serving, as peers of each other with `policy`,
/// each knowing where the other serves: either may dial.
pub fn pair_serving(a: &super::Home, b: &super::Home, sa: &Server, sb: &Server, policy: &str) {
    a.ok(&["peers", "add", &id(b), &sb.addr, "--policy", policy]);
    b.ok(&["peers", "add", &id(a), &sa.addr, "--policy", policy]);
}

/// Register `a` (serving at `server`) and `b` as peers of each other with
/// `policy`; `b` knows `a`'s address, so `b` dials.
pub fn pair(a: &super::Home, b: &super::Home, server: &Server, policy: &str) {
    a.ok(&["peers", "add", &id(b), "--policy", policy]);
    b.ok(&["peers", "add", &id(a), &server.addr, "--policy", policy]);
}
