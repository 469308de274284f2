//! The text analyzer of the recall index: how content, tags, type and a
//! query become index terms (docs/recall.md, "The analyzer").
//!
//! Words (Unicode letters and digits) → at most 40 bytes → lower case →
//! ASCII folding (`Déploiement` → `deploiement`) → English stemming
//! (tantivy's Snowball `Stemmer`: `deploys`, `deployed` → `deploy`) → joined
//! compounds: a split or hyphenated verb phrase and its one-word noun become
//! one term (`roll back`, `rolled back`, `roll-back`, `Rollback` →
//! `rollback`). The same analyzer runs at index time and at query time.
//!
//! Owns the analyzer and its [`ANALYZER_NAME`]: the index schema names the
//! tokenizer, so changing *anything* here must change that name, which
//! makes every existing index rebuild on open.
//!
//! Boundary: pure text → terms; never touches the index, the store or who
//! may see what.

use std::collections::HashMap;
use std::sync::OnceLock;

use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RawTokenizer, RemoveLongFilter, SimpleTokenizer,
    Stemmer, TextAnalyzer, Token, TokenFilter, TokenStream, Tokenizer,
};

/// The tokenizer name the text field is indexed with. Part of the index
/// schema: a new name (bump the number) rebuilds every index on open.
pub const ANALYZER_NAME: &str = "amos-en-2";

/// Longest term kept, in bytes (longer tokens are dropped).
const MAX_TOKEN_BYTES: usize = 40;

/// Joined compounds and their two-word forms. Both words are stemmed before
/// matching, so inflections count (`rolled back`, `logging in`, `backed up`).
const COMPOUNDS: &[(&str, &str, &str)] = &[
    ("rollback", "roll", "back"),
    ("rollout", "roll", "out"),
    ("setup", "set", "up"),
    ("login", "log", "in"),
    ("logout", "log", "out"),
    ("signin", "sign", "in"),
    ("signup", "sign", "up"),
    ("signoff", "sign", "off"),
    ("shutdown", "shut", "down"),
    ("backup", "back", "up"),
    ("failover", "fail", "over"),
    ("fallback", "fall", "back"),
    ("startup", "start", "up"),
    ("cleanup", "clean", "up"),
    ("teardown", "tear", "down"),
    ("checkout", "check", "out"),
    ("checkin", "check", "in"),
    ("lookup", "look", "up"),
    ("handoff", "hand", "off"),
    ("handover", "hand", "over"),
    ("takeover", "take", "over"),
    ("cutover", "cut", "over"),
    ("warmup", "warm", "up"),
    ("standup", "stand", "up"),
    ("hotfix", "hot", "fix"),
    ("workaround", "work", "around"),
    ("timeout", "time", "out"),
    ("downtime", "down", "time"),
    ("oncall", "on", "call"),
    ("runbook", "run", "book"),
    ("healthcheck", "health", "check"),
    ("database", "data", "base"),
    ("dataset", "data", "set"),
    ("codebase", "code", "base"),
    ("plugin", "plug", "in"),
    ("readonly", "read", "only"),
];

/// The analyzer the index and every query use.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(Stemmer::new(Language::English))
        .filter(Compounds)
        .build()
}

/// The distinct terms of `text`, in order of first appearance.
pub fn analyze(text: &str) -> Vec<String> {
    let mut analyzer = analyzer();
    let mut stream = analyzer.token_stream(text);
    let mut out: Vec<String> = Vec::new();
    while stream.advance() {
        let t = &stream.token().text;
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    out
}

/// The compounds by stem: first word → second word → the joined word.
type CompoundTable = HashMap<String, HashMap<String, String>>;

fn compound_table() -> &'static CompoundTable {
    static TABLE: OnceLock<CompoundTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut stem = TextAnalyzer::builder(RawTokenizer::default())
            .filter(Stemmer::new(Language::English))
            .build();
        let mut one = |w: &str| {
            let mut s = stem.token_stream(w);
            match s.advance() {
                true => s.token().text.clone(),
                false => w.to_owned(),
            }
        };
        let mut table = CompoundTable::new();
        for (joined, a, b) in COMPOUNDS {
            table.entry(one(a)).or_default().insert(one(b), one(joined));
        }
        table
    })
}

/// Token filter joining the two-word forms of [`COMPOUNDS`] into one term
/// (after stemming); the joined term spans both words. Tokens that start
/// no compound pass through without a copy.
#[derive(Clone)]
struct Compounds;

impl TokenFilter for Compounds {
    type Tokenizer<T: Tokenizer> = CompoundsFilter<T>;

    fn transform<T: Tokenizer>(self, tokenizer: T) -> CompoundsFilter<T> {
        CompoundsFilter { inner: tokenizer }
    }
}

#[derive(Clone)]
struct CompoundsFilter<T> {
    inner: T,
}

impl<T: Tokenizer> Tokenizer for CompoundsFilter<T> {
    type TokenStream<'a> = CompoundsStream<T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        CompoundsStream {
            tail: self.inner.token_stream(text),
            table: compound_table(),
            own: Token::default(),
            owned: false,
            pending: false,
            done: false,
        }
    }
}

struct CompoundsStream<S> {
    tail: S,
    table: &'static CompoundTable,
    /// The current token when it is not the tail's: a first word (joined
    /// with its second, or not).
    own: Token,
    /// Whether the current token is `own` (else the tail's current one).
    owned: bool,
    /// The tail's current token was read ahead and not consumed: it is the
    /// next one out.
    pending: bool,
    /// The tail has no more tokens.
    done: bool,
}

impl<S: TokenStream> TokenStream for CompoundsStream<S> {
    fn advance(&mut self) -> bool {
        self.owned = false;
        if self.pending {
            self.pending = false;
        } else if self.done || !self.tail.advance() {
            self.done = true;
            return false;
        }
        let Some(seconds) = self.table.get(&self.tail.token().text) else {
            return true;
        };
        // A first word: keep it, and look at the next one.
        self.own = self.tail.token().clone();
        self.owned = true;
        if !self.tail.advance() {
            self.done = true;
            return true;
        }
        let next = self.tail.token();
        match seconds.get(&next.text) {
            Some(joined) => {
                self.own.text.clone_from(joined);
                self.own.offset_to = next.offset_to;
            }
            None => self.pending = true,
        }
        true
    }

    fn token(&self) -> &Token {
        match self.owned {
            true => &self.own,
            false => self.tail.token(),
        }
    }

    fn token_mut(&mut self) -> &mut Token {
        match self.owned {
            true => &mut self.own,
            false => self.tail.token_mut(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflections_share_a_stem() {
        assert_eq!(analyze("deploys"), analyze("deploy"));
        assert_eq!(analyze("deployed"), analyze("deploying"));
        assert_eq!(analyze("Migrations"), analyze("migration"));
    }

    #[test]
    fn split_and_joined_compounds_are_one_term() {
        for (a, b) in [
            ("roll back", "Rollback"),
            ("rolled back", "rollbacks"),
            ("roll-back", "rollback"),
            ("set up", "setup"),
            ("setting up", "Setup"),
            ("log in", "login"),
            ("logged in", "logins"),
            ("sign up", "signup"),
            ("shut down", "shutdown"),
            ("shutting down", "shutdown"),
            ("back up", "backup"),
            ("backed up", "backups"),
            ("fail over", "failover"),
            ("failed over", "failover"),
            ("on-call", "oncall"),
        ] {
            assert_eq!(analyze(a), analyze(b), "{a:?} vs {b:?}");
            assert_eq!(analyze(a).len(), 1, "{a:?} is one term");
        }
    }

    #[test]
    fn a_first_word_without_its_partner_stays_itself() {
        assert_eq!(analyze("roll the dice"), ["roll", "the", "dice"]);
        // A word that starts a compound but is followed by another one.
        assert_eq!(analyze("set set up"), ["set", "setup"]);
        assert_eq!(analyze("back"), ["back"]);
        // A first word at the very end, and two first words in a row.
        assert_eq!(analyze("please roll"), ["pleas", "roll"]);
        assert_eq!(analyze("roll roll back"), ["roll", "rollback"]);
        assert_eq!(
            analyze("log out then back up"),
            ["logout", "then", "backup"]
        );
    }

    #[test]
    fn case_and_accents_fold() {
        assert_eq!(analyze("Déploiement"), analyze("deploiement"));
        assert_eq!(analyze("DÉPLOIEMENT"), analyze("déploiement"));
        assert_eq!(analyze("Café"), analyze("cafe"));
    }

    #[test]
    fn words_longer_than_the_limit_are_dropped() {
        let long = "a".repeat(MAX_TOKEN_BYTES + 1);
        assert_eq!(analyze(&format!("deploy {long}")), ["deploy"]);
    }
}
