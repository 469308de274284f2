//! The console's languages: English and Japanese. One catalogue
//! ([`CATALOGUE`], kept in one file per group of pages: [`frame`] for the
//! frame, the dashboard and the pack preview, [`memory`] for the memory
//! pages, the timeline and the graph, [`node`] for the node, peers, org
//! and audit pages) holds every string a page shows of its own, by key, in
//! each language; templates ask for them through their [`Chrome`]
//! (`chrome.t("key")`). The language is
//! `?lang=en|ja` (which also sets the `amos_console_lang` cookie, so the
//! choice sticks), else that cookie, else the browser's `Accept-Language`,
//! else English ([`negotiate`], a layer inside the guard).
//!
//! Must never: hand a page a key it has no text for without marking it —
//! a missing key renders as `⟦key⟧`, which the console's tests look for on
//! every page in both languages; or put a translation into a page
//! unescaped (askama escapes what `t` returns like any other text).
//!
//! [`Chrome`]: super::page::Chrome

mod frame;
mod memory;
mod node;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

/// A language the console speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Lang {
    /// English (the default).
    #[default]
    En,
    /// Japanese.
    Ja,
}

impl Lang {
    /// Every language, in the order the switch lists them.
    pub const ALL: [Lang; 2] = [Lang::En, Lang::Ja];

    /// Its tag (`en`, `ja`): `<html lang>`, `?lang=`, the cookie.
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Ja => "ja",
        }
    }

    /// Its name in itself, for the switch.
    pub fn name(self) -> &'static str {
        match self {
            Lang::En => "English",
            Lang::Ja => "日本語",
        }
    }

    /// The language a tag names (`ja`, `ja-JP`, `EN-gb`), if the console
    /// speaks it.
    pub fn of_tag(tag: &str) -> Option<Lang> {
        let primary = tag.trim().split(['-', '_']).next()?.to_ascii_lowercase();
        Lang::ALL.into_iter().find(|l| l.tag() == primary)
    }

    /// The best language an `Accept-Language` header names: the highest
    /// `q` among the ones spoken (the first of equals), `None` if none is.
    pub fn of_accept(header: &str) -> Option<Lang> {
        let mut best: Option<(f32, Lang)> = None;
        for item in header.split(',') {
            let mut parts = item.split(';');
            let Some(lang) = parts.next().and_then(Lang::of_tag) else {
                continue;
            };
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
                best = Some((q, lang));
            }
        }
        best.map(|(_, l)| l)
    }

    /// The text of `key` in this language (`⟦key⟧` if the catalogue has none).
    pub fn t(self, key: &str) -> &'static str {
        match by_key().get(key) {
            Some((en, ja)) => match self {
                Lang::En => en,
                Lang::Ja => ja,
            },
            None => missing(key),
        }
    }
}

/// The mark of a key the catalogue lacks (leaked once per key and process:
/// keys are the templates' literals, a bounded set).
fn missing(key: &str) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static MARKS: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    let mut marks = MARKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    marks
        .entry(key.to_owned())
        .or_insert_with(|| Box::leak(format!("⟦{key}⟧").into_boxed_str()))
}

/// The language a request asked for, and its address without `lang` (for
/// the switch's links).
#[derive(Debug, Clone, Default)]
pub(crate) struct Locale {
    pub lang: Lang,
    /// The path and query of the request, `lang` left out.
    pub here: String,
}

impl Locale {
    /// The address of this page in `lang`.
    pub fn switch_to(&self, lang: Lang) -> String {
        let sep = if self.here.contains('?') { '&' } else { '?' };
        format!("{}{sep}lang={}", self.here, lang.tag())
    }
}

tokio::task_local! {
    /// The language of the request being answered (set by [`negotiate`]).
    static REQUEST_LANG: Lang;
}

/// The language of the request being answered, for what is rendered
/// without a page's [`Locale`] (the error page); English outside a request
/// [`negotiate`] saw (one the guard refused).
pub(crate) fn current() -> Lang {
    REQUEST_LANG.try_with(|l| *l).unwrap_or_default()
}

/// The cookie that keeps the chosen language.
pub(crate) const LANG_COOKIE: &str = "amos_console_lang";

fn cookie_lang(headers: &HeaderMap) -> Option<Lang> {
    super::cookie::cookie(headers, LANG_COOKIE).and_then(|v| Lang::of_tag(&v))
}

/// The layer that decides each request's [`Locale`] (an extension the
/// pages read) and keeps a `?lang=` choice in a cookie.
pub(crate) async fn negotiate(mut req: Request, next: Next) -> Response {
    let pairs: Vec<(String, String)> = req
        .uri()
        .query()
        .map(|q| serde_urlencoded::from_str(q).unwrap_or_default())
        .unwrap_or_default();
    let asked = pairs
        .iter()
        .find(|(k, _)| k == "lang")
        .and_then(|(_, v)| Lang::of_tag(v));
    let headers = req.headers();
    let lang = asked
        .or_else(|| cookie_lang(headers))
        .or_else(|| {
            headers
                .get(header::ACCEPT_LANGUAGE)
                .and_then(|v| v.to_str().ok())
                .and_then(Lang::of_accept)
        })
        .unwrap_or_default();
    let rest: Vec<&(String, String)> = pairs.iter().filter(|(k, _)| k != "lang").collect();
    // One leading slash: `//host` would be another site's address.
    let mut here = format!("/{}", req.uri().path().trim_start_matches(['/', '\\']));
    if !rest.is_empty() {
        here.push('?');
        here.push_str(&serde_urlencoded::to_string(&rest).unwrap_or_default());
    }
    req.extensions_mut().insert(Locale { lang, here });
    let mut resp = REQUEST_LANG.scope(lang, next.run(req)).await;
    if let Some(l) = asked {
        let c = format!(
            "{LANG_COOKIE}={}; Path=/; SameSite=Strict; Max-Age=31536000",
            l.tag()
        );
        if let Ok(v) = HeaderValue::from_str(&c) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    resp
}

/// The catalogue, by page: every string the console shows of its own,
/// as (key, English, Japanese).
pub(crate) const CATALOGUE: &[&[(&str, &str, &str)]] =
    &[frame::ENTRIES, memory::ENTRIES, node::ENTRIES];

/// Every entry of [`CATALOGUE`].
pub(crate) fn entries() -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str)>
{
    CATALOGUE.iter().flat_map(|c| c.iter())
}

/// The catalogue by key (built once).
fn by_key() -> &'static std::collections::HashMap<&'static str, (&'static str, &'static str)> {
    use std::sync::OnceLock;
    static MAP: OnceLock<std::collections::HashMap<&'static str, (&'static str, &'static str)>> =
        OnceLock::new();
    MAP.get_or_init(|| entries().map(|(k, en, ja)| (*k, (*en, *ja))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are unique and every one has a text in both languages.
    #[test]
    fn the_catalogue_has_every_key_once_in_both_languages() {
        let mut keys: Vec<&str> = entries().map(|(k, _, _)| *k).collect();
        keys.sort();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "a key twice");
        for (k, en, ja) in entries() {
            assert!(!en.trim().is_empty() && !ja.trim().is_empty(), "{k}");
        }
    }

    /// Every key a template or a page module asks for is in the catalogue:
    /// no page can show an untranslated key.
    #[test]
    fn every_key_the_pages_ask_for_is_translated() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut asked = Vec::new();
        for dir in ["templates/console", "src/front/console"] {
            for e in std::fs::read_dir(root.join(dir)).unwrap() {
                let p = e.unwrap().path();
                if !p.is_file() {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                for opener in [".t(\""] {
                    for (at, _) in text.match_indices(opener) {
                        let rest = &text[at + opener.len()..];
                        let key = &rest[..rest.find('"').unwrap()];
                        asked.push((p.display().to_string(), key.to_owned()));
                    }
                }
            }
        }
        assert!(asked.len() > 20, "the scan found the pages' keys");
        for (file, key) in &asked {
            if file.ends_with("i18n.rs") {
                continue;
            }
            for lang in Lang::ALL {
                assert!(
                    !lang.t(key).starts_with('⟦'),
                    "{file}: {key} has no {lang:?} text"
                );
            }
        }
        assert_eq!(Lang::Ja.t("no.such.key"), "⟦no.such.key⟧");
    }

    #[test]
    fn accept_language_picks_the_best_spoken_language() {
        assert_eq!(Lang::of_accept("ja,en;q=0.8"), Some(Lang::Ja));
        assert_eq!(Lang::of_accept("ja-JP;q=0.5, en-GB;q=0.9"), Some(Lang::En));
        assert_eq!(Lang::of_accept("fr-FR, ja;q=0.3"), Some(Lang::Ja));
        assert_eq!(Lang::of_accept("fr, de"), None);
        assert_eq!(Lang::of_accept("ja;q=0, en;q=0.1"), Some(Lang::En));
        assert_eq!(Lang::of_accept(""), None);
    }
}
