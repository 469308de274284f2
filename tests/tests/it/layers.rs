//! The layers point one way (ARCHITECTURE.md): no import cycle between the
//! modules of any library crate, and inside amos-node every top-level
//! module only uses the ones below it in [`NODE_LAYERS`].
//!
//! Edges are read from the source as `crate::…`, `super::…` and `self::…`
//! paths outside `#[cfg(test)]` modules and comments (file = module); an
//! edge between a module and its own ancestor or descendant is structure,
//! not a dependency. A path through a folder's `mod.rs` re-export counts as
//! an edge to that folder, which the layer rule then judges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// amos-node's top-level modules, lowest first. A module may use its own
/// layer's modules and any below; never one above. The binary (`main.rs`,
/// `cli/`) sits on top and is not a library module.
const NODE_LAYERS: &[&[&str]] = &[
    &["error", "clock", "events"],
    &["home"],
    &["progress"],
    &["store"],
    &["index"],
    &["recall"],
    &["api"],
    &["net"],
    &["ops"],
    &["front"],
    &["bench"],
    &["lib"],
];

type Module = Vec<String>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module a file is, and whether it is a folder's root file.
fn module_of(src: &Path, file: &Path) -> (Module, bool) {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let root = matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    );
    if root {
        parts.pop();
    }
    (parts, root)
}

/// The source a module's dependencies are read from: no comments, nothing
/// from the first `#[cfg(test)]` module on.
fn code(text: &str) -> String {
    let cut = text
        .find("#[cfg(test)]\nmod ")
        .or_else(|| text.find("#[cfg(test)]\npub mod "))
        .unwrap_or(text.len());
    text[..cut]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a::b`, `super::a`, `self::a` path (and each member of a
/// `crate::{a, b::c}` group) as (kind, segments).
fn paths(code: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for kind in ["crate", "super", "self"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(kind).map(|i| i + from) {
            from = i + kind.len();
            let before_ok =
                i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
            if !before_ok || !code[from..].starts_with("::") {
                continue;
            }
            let rest = &code[from + 2..];
            if kind == "crate" && rest.starts_with('{') {
                let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
                for member in group.split(',') {
                    let member = member.split(" as ").next().unwrap_or("").trim();
                    if !member.is_empty() {
                        out.push((kind.to_owned(), segments(member)));
                    }
                }
                continue;
            }
            out.push((kind.to_owned(), segments(rest)));
        }
    }
    out
}

fn segments(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for seg in s.split("::") {
        let word: String = seg
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if word.is_empty() {
            break;
        }
        out.push(word);
        if !seg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            break;
        }
    }
    out
}

/// Module → the modules it uses, for one crate's `src`.
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut mods: BTreeMap<Module, (PathBuf, bool)> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        // The binary's modules (main.rs, cli/) are another crate.
        if rel.starts_with("cli") || rel == Path::new("main.rs") {
            continue;
        }
        let (m, root) = module_of(src, &f);
        mods.insert(m, (f, root));
    }
    let resolve = |base: &[String], segs: &[String]| -> Option<Module> {
        let mut best = None;
        for i in 1..=segs.len() {
            let cand: Module = base.iter().chain(&segs[..i]).cloned().collect();
            if mods.contains_key(&cand) {
                best = Some(cand);
            }
        }
        best
    };
    let mut edges = BTreeMap::new();
    for (m, (file, _root)) in &mods {
        let text = std::fs::read_to_string(file).unwrap();
        let mut out = BTreeSet::new();
        for (kind, segs) in paths(&code(&text)) {
            let base: Module = match kind.as_str() {
                "crate" => vec![],
                "super" => m[..m.len().saturating_sub(1)].to_vec(),
                _ => m.clone(),
            };
            let target = resolve(&base, &segs)
                .or_else(|| (kind == "super" && mods.contains_key(&base)).then(|| base.clone()));
            let Some(t) = target else { continue };
            let related = t.starts_with(m) || m.starts_with(&t);
            if !related {
                out.insert(t);
            }
        }
        edges.insert(m.clone(), out);
    }
    edges
}

/// A cycle through `graph`, if there is one.
fn a_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        v: &Module,
        g: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<Module, u8>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        state.insert(v.clone(), 1);
        stack.push(v.clone());
        for w in g.get(v).into_iter().flatten() {
            match state.get(w).copied().unwrap_or(0) {
                0 => {
                    if let Some(c) = visit(w, g, state, stack) {
                        return Some(c);
                    }
                }
                1 => {
                    let at = stack.iter().position(|x| x == w).unwrap_or(0);
                    return Some(stack[at..].to_vec());
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(v.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in graph.keys() {
        if state.get(v).copied().unwrap_or(0) == 0
            && let Some(c) = visit(v, graph, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("::")
    }
}

#[test]
fn no_library_crate_has_an_import_cycle() {
    for krate in ["protocol", "acl", "sync", "embed", "sim", "node"] {
        let g = graph(&repo().join(krate).join("src"));
        assert!(g.len() > 1, "{krate}: no modules read");
        if let Some(c) = a_cycle(&g) {
            panic!(
                "{krate}: import cycle {}",
                c.iter().map(name).collect::<Vec<_>>().join(" -> ")
            );
        }
    }
}

#[test]
fn amos_node_uses_only_the_layers_below() {
    let g = graph(&repo().join("node/src"));
    let layer = |m: &Module| -> usize {
        let top = m.first().map(String::as_str).unwrap_or("lib");
        let top = top.strip_prefix("bench").map_or(top, |_| "bench");
        NODE_LAYERS
            .iter()
            .position(|l| l.contains(&top))
            .unwrap_or_else(|| panic!("{top}: not in NODE_LAYERS; place the new module in a layer"))
    };
    let mut wrong = Vec::new();
    for (m, uses) in &g {
        for t in uses {
            if layer(t) > layer(m) {
                wrong.push(format!("{} uses {}", name(m), name(t)));
            }
        }
    }
    assert!(wrong.is_empty(), "upward dependencies: {wrong:#?}");
}

#[test]
fn the_reader_sees_every_kind_of_path() {
    let c = code(
        "use crate::store::{Tx, text};\nuse super::gate::check; // crate::ignored\nlet x = self::a::b();\nuse crate::{api::Node, net};\n#[cfg(test)]\nmod tests { use crate::late; }",
    );
    let p = paths(&c);
    let kinds: Vec<(&str, String)> = p.iter().map(|(k, s)| (k.as_str(), s.join("::"))).collect();
    assert!(kinds.contains(&("crate", "store".into())), "{kinds:?}");
    assert!(
        kinds.contains(&("super", "gate::check".into())),
        "{kinds:?}"
    );
    assert!(kinds.contains(&("self", "a::b".into())), "{kinds:?}");
    assert!(kinds.contains(&("crate", "api::Node".into())), "{kinds:?}");
    assert!(kinds.contains(&("crate", "net".into())), "{kinds:?}");
    assert!(
        !kinds.iter().any(|(_, s)| s == "ignored" || s == "late"),
        "{kinds:?}"
    );
}

/// The storage boundary (ARCHITECTURE.md, `store/`): no SQL and no
/// `rusqlite` in amos-node's production code outside `node/src/store/`.
/// `error.rs` may name `rusqlite::Error` (the conversion into `NodeError`).
const STORAGE_EXCEPTIONS: &[(&str, &str)] = &[("error.rs", "rusqlite::Error")];

/// What Rust source holds, lexed just enough: string literals (with the
/// line each starts on) and the identifiers of code, never what is in a
/// comment or a literal.
#[derive(Default)]
struct Lexed {
    strings: Vec<(usize, String)>,
    /// (line, identifier, the `::`-path it starts, as written)
    idents: Vec<(usize, String, String)>,
}

fn lex(src: &str) -> Lexed {
    let b: Vec<char> = src.chars().collect();
    let mut out = Lexed::default();
    let (mut i, mut line) = (0, 1);
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(b[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' {
            let start = line;
            let mut s = String::new();
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                if let Some(&ch) = b.get(i) {
                    line += usize::from(ch == '\n');
                    s.push(ch);
                }
                i += 1;
            }
            i += 1;
            out.strings.push((start, s));
        } else if (c == 'r' || (c == 'b' && next == Some('r'))) && (i == 0 || !ident(b[i - 1])) && {
            let mut j = i + if c == 'b' { 2 } else { 1 };
            while b.get(j) == Some(&'#') {
                j += 1;
            }
            b.get(j) == Some(&'"')
        } {
            // A raw string: r"…", r#"…"#, br"…".
            i += if c == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while b[i] == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            let (start, mut s) = (line, String::new());
            while i < b.len() {
                if b[i] == '"' && (1..=hashes).all(|k| b.get(i + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                line += usize::from(b[i] == '\n');
                s.push(b[i]);
                i += 1;
            }
            out.strings.push((start, s));
        } else if c == '\'' {
            // A char literal ('x', '\n', '"'), or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if ident(c) && (i == 0 || !ident(b[i - 1])) {
            let start = i;
            while i < b.len() && (ident(b[i]) || (b[i] == ':' && b.get(i + 1) == Some(&':'))) {
                i += if b[i] == ':' { 2 } else { 1 };
            }
            let path: String = b[start..i].iter().collect();
            let first = path.split("::").next().unwrap_or("").to_owned();
            out.idents.push((line, first, path));
        } else {
            i += 1;
        }
    }
    out
}

/// Whether a string literal is an SQL statement: it starts (after
/// trimming, any case) with a statement's keyword followed by what that
/// statement has next, so prose that starts "Replace the text…" or
/// "Delete a memory…" is not one.
fn is_sql(lit: &str) -> bool {
    let words: Vec<String> = lit
        .split(|c: char| c.is_whitespace() || c == '(' || c == ';')
        .filter(|w| !w.is_empty())
        .take(3)
        .map(str::to_ascii_uppercase)
        .collect();
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    let any_of = |s: &str, set: &[&str]| set.contains(&s);
    let upper = lit.to_ascii_uppercase();
    match w(0) {
        "SELECT" => {
            upper.contains(" FROM ")
                || upper.contains("\nFROM ")
                || w(1).starts_with(|c: char| c.is_ascii_digit() || "*?({".contains(c))
        }
        "INSERT" => any_of(w(1), &["INTO", "OR"]),
        "REPLACE" => w(1) == "INTO",
        "DELETE" => w(1) == "FROM",
        "UPDATE" => w(2) == "SET" || any_of(w(1), &["OR"]),
        "WITH" => upper.contains(" AS (") || upper.contains(" AS(") || w(1) == "RECURSIVE",
        "PRAGMA" => !w(1).is_empty(),
        "CREATE" => any_of(
            w(1),
            &[
                "TABLE",
                "INDEX",
                "UNIQUE",
                "VIEW",
                "TRIGGER",
                "TEMP",
                "TEMPORARY",
                "VIRTUAL",
            ],
        ),
        "BEGIN" => {
            w(1).is_empty() || any_of(w(1), &["IMMEDIATE", "DEFERRED", "EXCLUSIVE", "TRANSACTION"])
        }
        "ALTER" => w(1) == "TABLE",
        "DROP" => any_of(w(1), &["TABLE", "INDEX", "VIEW", "TRIGGER"]),
        _ => false,
    }
}

/// What breaks the storage rule in one file's source (`rel`: its path
/// under `node/src`): each as "file:line: what".
fn storage_breaches(rel: &str, text: &str) -> Vec<String> {
    // Production code only: nothing from the first `#[cfg(test)]` module on.
    let cut = text
        .find("#[cfg(test)]\nmod ")
        .or_else(|| text.find("#[cfg(test)]\npub mod "))
        .unwrap_or(text.len());
    let lexed = lex(&text[..cut]);
    let mut out = Vec::new();
    for (line, s) in &lexed.strings {
        if is_sql(s) {
            let first = s.trim().lines().next().unwrap_or("");
            out.push(format!("{rel}:{line}: SQL literal {first:?}"));
        }
    }
    for (line, first, path) in &lexed.idents {
        let excepted = STORAGE_EXCEPTIONS
            .iter()
            .any(|(file, allowed)| *file == rel && path == allowed);
        if first == "rusqlite" && !excepted {
            out.push(format!("{rel}:{line}: names {path}"));
        }
    }
    out
}

#[test]
fn sql_and_rusqlite_live_only_in_the_store() {
    let src = repo().join("node/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut breaches = Vec::new();
    let mut read = 0;
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.starts_with("store") {
            continue;
        }
        read += 1;
        let rel = rel.to_string_lossy().replace('\\', "/");
        breaches.extend(storage_breaches(
            &rel,
            &std::fs::read_to_string(&f).unwrap(),
        ));
    }
    assert!(read > 50, "only {read} files read");
    assert!(
        breaches.is_empty(),
        "SQL or rusqlite outside node/src/store/ (ask the store a typed question instead): {breaches:#?}"
    );
}

#[test]
fn the_storage_rule_sees_sql_and_rusqlite_and_nothing_else() {
    let src = r####"
//! Docs may say rusqlite and "SELECT x FROM y".
use rusqlite::Connection;
fn f(c: &Conn) {
    let a = "select id from memories where x = 1";
    let b = r#"  INSERT INTO meta(key) VALUES ('x')"#;
    let c = format!("UPDATE memories SET a = {}", 1);
    let d = "Replace the text of a memory you own"; // "DELETE FROM x"
    let e = "Delete a memory you own, everywhere";
    let q = '"'; let l: &'static str = "with a lifetime";
    let p = "PRAGMA quick_check";
    let u = "https://example.org/select";
    /* "DROP TABLE x" */
    let t = rusqlite::params![1];
}
#[cfg(test)]
mod tests { fn g() { let s = "SELECT 1"; let c = rusqlite::Connection::open_in_memory(); } }
"####;
    let got = storage_breaches("x.rs", src);
    let want = [
        "x.rs:3: names rusqlite::Connection",
        "x.rs:5: SQL literal \"select id from memories where x = 1\"",
        "x.rs:6: SQL literal \"INSERT INTO meta(key) VALUES ('x')\"",
        "x.rs:7: SQL literal \"UPDATE memories SET a = {}\"",
        "x.rs:11: SQL literal \"PRAGMA quick_check\"",
        "x.rs:14: names rusqlite::params",
    ];
    let mut got_sorted = got.clone();
    got_sorted.sort();
    let mut want_sorted: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want_sorted.sort();
    assert_eq!(got_sorted, want_sorted, "{got:#?}");
    assert!(storage_breaches("error.rs", "#[from] rusqlite::Error").is_empty());
    assert_eq!(
        storage_breaches("other.rs", "#[from] rusqlite::Error").len(),
        1
    );
}
