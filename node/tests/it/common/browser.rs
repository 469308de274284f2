//! A minimal WebDriver client for the console's browser test: a
//! chromedriver process on a free port of 127.0.0.1 and one headless
//! Chromium session on it, driven with JSON over HTTP (ureq). Finding an
//! element waits for it (the session's implicit timeout), so a page a
//! click is loading is waited for, bounded.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// Debian's `chromium` and `chromium-driver`.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver process and one browser session on it.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: ureq::Agent,
}

impl Browser {
    pub fn start(profile: &Path) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        // Ready once it says so on stdout.
        let out = driver.stdout.take().unwrap();
        let mut lines = BufReader::new(out).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("started successfully") => break,
                Some(Ok(_)) => continue,
                other => panic!("chromedriver did not start: {other:?}"),
            }
        }
        std::thread::spawn(move || for _ in lines {});
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        let base = format!("http://127.0.0.1:{port}");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,1000", "--no-first-run", "--no-default-browser-check",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-extensions", "--disable-default-apps",
                    "--disable-domain-reliability", "--metrics-recording-only",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        }}});
        let mut b = Browser {
            driver,
            base,
            session: String::new(),
            http,
        };
        let v = b.call("POST", "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_owned();
        // Finding an element waits for it (a page a click is loading).
        b.call(
            "POST",
            &b.s("/timeouts"),
            Some(json!({"implicit": 30_000, "pageLoad": 60_000, "script": 60_000})),
        );
        b
    }

    /// One WebDriver command; returns its `value`.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let r = match method {
            "GET" => self.http.get(&url).call(),
            "DELETE" => self.http.delete(&url).call(),
            _ => self
                .http
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or(json!({})).to_string()),
        };
        let mut r = r.expect("WebDriver request");
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().expect("WebDriver body");
        let v: Value = serde_json::from_str(&text).expect("WebDriver JSON");
        assert!(status < 300, "WebDriver {method} {path}: {status} {v}");
        v["value"].clone()
    }

    pub fn s(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", &self.s("/url"), Some(json!({ "url": url })));
    }

    /// The address bar's URL.
    pub fn current_url(&self) -> String {
        self.call("GET", &self.s("/url"), None)
            .as_str()
            .expect("url")
            .to_owned()
    }

    pub fn find_all(&self, css: &str) -> Vec<String> {
        let v = self.call(
            "POST",
            &self.s("/elements"),
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_array()
            .unwrap()
            .iter()
            // An element reference: an object with one (W3C-named) key.
            .map(|e| {
                let obj = e.as_object().expect("an element reference");
                obj.values().next().unwrap().as_str().unwrap().to_owned()
            })
            .collect()
    }

    pub fn find(&self, css: &str) -> String {
        let all = self.find_all(css);
        if all.len() != 1 {
            let url = self.call("GET", &self.s("/url"), None);
            let src = self.call("GET", &self.s("/source"), None);
            let src = src.as_str().unwrap_or("");
            panic!(
                "one element for {css:?}, found {} at {url}: {}",
                all.len(),
                &src[..src.len().min(3000)]
            );
        }
        all[0].clone()
    }

    pub fn text(&self, css: &str) -> String {
        let e = self.find(css);
        self.call("GET", &self.s(&format!("/element/{e}/text")), None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub fn click(&self, css: &str) {
        let e = self.find(css);
        self.call(
            "POST",
            &self.s(&format!("/element/{e}/click")),
            Some(json!({})),
        );
    }

    /// Click what submits a form and wait until the answer page is loaded:
    /// reading the old page meanwhile could find an element that goes stale.
    pub fn click_to_page(&self, css: &str) {
        self.script("window.__old_page = true; return null;");
        self.click(css);
        for _ in 0..100_000 {
            let now = self.script(
                "return window.__old_page === undefined && document.readyState === 'complete';",
            );
            if now == json!(true) {
                return;
            }
        }
        panic!("clicking {css} led to no new page");
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.call(
            "POST",
            &self.s(&format!("/element/{e}/value")),
            Some(json!({ "text": text })),
        );
    }

    /// An async script: its last argument is the callback; the answer is
    /// what it was called with (bounded by the session's script timeout).
    pub fn script_async(&self, js: &str, args: Value) -> Value {
        self.call(
            "POST",
            &self.s("/execute/async"),
            Some(json!({"script": js, "args": args})),
        )
    }

    pub fn script(&self, js: &str) -> Value {
        self.call(
            "POST",
            &self.s("/execute/sync"),
            Some(json!({"script": js, "args": []})),
        )
    }

    /// The memory ids the page lists, in order (none is an answer too:
    /// read at once, not waited for).
    pub fn listed(&self) -> Vec<String> {
        let v = self.script(
            "return Array.from(document.querySelectorAll('#memories tbody tr'))
                 .map(function (r) { return r.getAttribute('data-id'); });",
        );
        v.as_array()
            .expect("ids")
            .iter()
            .map(|i| i.as_str().expect("an id").to_owned())
            .collect()
    }

    pub fn shot(&self, dir: &Path, name: &str) -> PathBuf {
        let b64 = self.call("GET", &self.s("/screenshot"), None);
        let png = data_encoding::BASE64
            .decode(b64.as_str().unwrap().as_bytes())
            .expect("base64 PNG");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let p = dir.join(format!("{name}.png"));
        std::fs::write(&p, png).unwrap();
        p
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self
                .http
                .delete(format!("{}/session/{}", self.base, self.session))
                .call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
