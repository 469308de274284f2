//! Many processes share one home: 16 concurrent writer processes × 200 adds
//! each lose nothing and never fail with "database is locked", while reader
//! processes search (and so catch the index up) at the same time.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::common::Home;

const WRITERS: usize = 16;
const ADDS_PER_WRITER: usize = 200;

#[test]
fn sixteen_writer_processes_lose_nothing() {
    let home = Arc::new(Home::new());
    home.ok(&["team", "create", "t"]);
    for w in 0..WRITERS {
        home.ok(&["agent", "add", &format!("w{w}"), "--team", "t"]);
    }
    let ids = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let writers_done = Arc::new(AtomicBool::new(false));

    // Two readers search in a loop while the writers write, so index
    // catch-up (which takes the index lock) races with SQLite writes.
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let home = Arc::clone(&home);
            let done = Arc::clone(&writers_done);
            let failures = Arc::clone(&failures);
            thread::spawn(move || {
                let mut rounds = 0;
                while !done.load(Ordering::Relaxed) && rounds < 500 {
                    let run = home.run(&["search", "entry", "--as", &format!("w{r}"), "-k", "5"]);
                    if run.code != 0 {
                        failures.lock().unwrap().push(format!("reader: {run:?}"));
                    }
                    rounds += 1;
                }
            })
        })
        .collect();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let home = Arc::clone(&home);
            let ids = Arc::clone(&ids);
            let failures = Arc::clone(&failures);
            thread::spawn(move || {
                let agent = format!("w{w}");
                for i in 0..ADDS_PER_WRITER {
                    let text = format!("entry {i} from writer {w}");
                    let run =
                        home.run(&["--json", "add", &text, "--as", &agent, "--share", "team:t"]);
                    if run.code == 0 {
                        ids.lock()
                            .unwrap()
                            .push(run.json()["id"].as_str().unwrap().to_owned());
                    } else {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("writer {w} add {i}: {run:?}"));
                    }
                }
            })
        })
        .collect();
    for t in writers {
        t.join().unwrap();
    }
    writers_done.store(true, Ordering::Relaxed);
    for t in readers {
        t.join().unwrap();
    }

    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures, first: {}",
        failures.len(),
        failures[0]
    );
    let ids = ids.lock().unwrap();
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), WRITERS * ADDS_PER_WRITER);
    assert_eq!(unique.len(), ids.len(), "memory ids must be unique");

    // Every write is in the store and visible to a team member.
    let status = home.json(&["status"]);
    assert_eq!(status["memories"], (WRITERS * ADDS_PER_WRITER) as u64);
    let listed = home.json(&["list", "--as", "w0", "--limit", "10000"]);
    let listed: HashSet<String> = listed["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed.len(), ids.len());
    assert!(ids.iter().all(|id| listed.contains(id)));

    // Every writer's last entry is found by search (the index caught up).
    for w in 0..WRITERS {
        let q = format!("entry {} writer {w}", ADDS_PER_WRITER - 1);
        let hits = home.json(&["search", &q, "--as", "w0", "-k", "1"]);
        assert_eq!(
            hits["hits"][0]["content"],
            format!("entry {} from writer {w}", ADDS_PER_WRITER - 1)
        );
    }
    let check = home.json(&["check"]);
    assert_eq!(check["ok"], true, "{check}");
    assert_eq!(check["index_docs"], (WRITERS * ADDS_PER_WRITER) as u64);
}
