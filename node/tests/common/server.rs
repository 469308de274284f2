//! A running `amos serve` for multi-process tests, and free loopback ports.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Home;

/// A free UDP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.local_addr().expect("addr").port()
}

pub fn id(h: &Home) -> String {
    h.json(&["id"])["node_id"].as_str().expect("id").to_owned()
}

/// A running `amos serve --no-mdns` on 127.0.0.1; stopped with SIGTERM on drop.
pub struct Server {
    child: Option<Child>,
    pub addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(home: &Home) -> Server {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut child = home
            .cmd()
            .env("AMOS_LOG", "info")
            .args(["serve", "--listen", &addr, "--no-mdns"])
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
                    log.lock().unwrap().push_str(&line);
                    log.lock().unwrap().push('\n');
                }
            });
        }
        let mut s = Server {
            child: Some(child),
            addr,
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
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
