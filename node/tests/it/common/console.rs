//! A running `amos console` for the console tests: started on
//! 127.0.0.1:0, ready once it prints its URL, its token exchanged for a
//! session cookie (the printed URL's redirect), stopped with SIGTERM on
//! drop; and a small HTTP client over it (ureq, no redirects followed,
//! statuses returned rather than raised).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A console process.
pub struct Console {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub token: String,
    pub port: u16,
    /// `amos_console_PORT=SECRET`: the session the printed URL opened.
    session: String,
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Console {
    /// `amos console --listen 127.0.0.1:0` on `home`.
    pub fn start(home: &Path) -> Console {
        let mut child = Command::new(super::amos_bin())
            .env("AMOS_HOME", home)
            .env_remove("AMOS_AGENT")
            .env("AMOS_LOG", "warn")
            .args(["console", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn amos console");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the console's URL");
        let url = line.trim();
        let (base, token) = url
            .split_once("/?token=")
            .unwrap_or_else(|| panic!("the console printed {url:?}, not its URL"));
        let port = base.rsplit(':').next().unwrap().parse().expect("port");
        let mut c = Console {
            child: Some(child),
            base: base.to_owned(),
            token: token.to_owned(),
            port,
            session: String::new(),
        };
        c.session = c.open_session();
        c
    }

    /// Open a session with the printed URL: the `name=secret` its
    /// redirect's cookie sets.
    pub fn open_session(&self) -> String {
        let first = self.get_with(&format!("/?token={}", self.token), &[]);
        assert_eq!(first.status, 303, "{first:?}");
        let set = first.header("set-cookie").expect("a session cookie");
        set.split(';').next().unwrap().to_owned()
    }

    /// The URL with the token, as printed.
    pub fn url(&self) -> String {
        format!("{}/?token={}", self.base, self.token)
    }

    /// The session's cookie.
    pub fn cookie(&self) -> String {
        self.session.clone()
    }

    /// The CSRF token, read from a page's meta tag.
    pub fn csrf(&self) -> String {
        let page = self.get("/");
        let at = page
            .body
            .find("name=\"csrf-token\" content=\"")
            .expect("csrf meta");
        let rest = &page.body[at + "name=\"csrf-token\" content=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into()
    }

    fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
        let mut r = r.expect("HTTP request to the console");
        let headers = r
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        Answer {
            status: r.status().as_u16(),
            body: r.body_mut().read_to_string().expect("body"),
            headers,
        }
    }

    /// GET with the cookie.
    pub fn get(&self, path: &str) -> Answer {
        self.get_with(path, &[("Cookie", &self.cookie())])
    }

    /// GET with exactly these headers.
    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let mut req = Self::agent().get(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::answer(req.call())
    }

    /// POST a form with the cookie and the CSRF token.
    pub fn post(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        let csrf = self.csrf();
        let mut f: Vec<(&str, &str)> = form.to_vec();
        f.push(("csrf", &csrf));
        self.post_with(path, &f, &[("Cookie", &self.cookie())])
    }

    /// POST a form with exactly these fields and headers.
    pub fn post_with(&self, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> Answer {
        let mut req = Self::agent().post(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::answer(req.send_form(form.iter().copied()))
    }

    /// SIGTERM, then wait (bounded): whether it exited by itself, 0.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The `data-id` values of a memories list page, in order.
pub fn listed_ids(page: &str) -> Vec<String> {
    page.split("<tr data-id=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].to_owned())
        .collect()
}

/// The ids `amos list --as AGENT` prints, in order.
pub fn cli_list(h: &super::Home, agent: &str) -> Vec<String> {
    h.json(&["list", "--as", agent])["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Every console page, in the one list the language and browser tests
/// iterate: (name, address, a CSS selector of the element the page is
/// about). `memory` is a memory alice sees, `agent` alice.
pub fn pages(memory: &str) -> Vec<(&'static str, String, &'static str)> {
    vec![
        ("dashboard-none", "/".to_owned(), "#dash-form"),
        ("dashboard", "/?as=alice".to_owned(), "#visible"),
        ("node", "/node".to_owned(), "#node-id"),
        ("peers", "/peers".to_owned(), "#invite-form"),
        ("memories", "/memories?as=alice".to_owned(), "#memories"),
        (
            "memory",
            format!("/memories/{memory}?as=alice"),
            "#provenance",
        ),
        ("pack", "/pack?as=alice&q=launch".to_owned(), "#pack-size"),
        ("timeline", "/timeline?as=alice".to_owned(), "#timeline"),
        (
            "timeline-valid-at",
            "/timeline?as=alice&valid_at=2030-01-01".to_owned(),
            "#true-then",
        ),
        (
            "graph",
            format!("/graph?as=alice&around={memory}"),
            "#graph",
        ),
        ("org", "/org".to_owned(), "#agents"),
        ("audit", "/audit".to_owned(), "#refused-facts"),
    ]
}
