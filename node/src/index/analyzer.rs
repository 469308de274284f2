//! The text analyzer of the recall index: how content, tags, type and a
//! query become index terms (docs/recall.md, "The analyzer").
//!
//! Words (runs of Unicode letters and digits; a run of Chinese, Japanese or
//! Korean characters becomes its overlapping character bigrams) → under
//! 40 bytes → lower case → ASCII folding (`Déploiement` → `deploiement`) →
//! English stemming (tantivy's Snowball `Stemmer`: `deploys`, `deployed` →
//! `deploy`) → joined compounds: a split or hyphenated verb phrase and its
//! one-word noun become one term (`roll back`, `rolled back`, `roll-back`,
//! `Rollback` → `rollback`) → English stop-words removed ([`STOP_WORDS`]:
//! `the`, `how`, `my` never carry a match). The same analyzer runs at
//! index time and at query time.
//!
//! Owns the analyzer and its [`ANALYZER_NAME`]: the index schema names the
//! tokenizer, so changing *anything* here must change that name, which
//! makes every existing index rebuild on open.
//!
//! Boundary: pure text → terms; never touches the index, the store or who
//! may see what.

use std::collections::{HashMap, HashSet};
use std::iter::Peekable;
use std::str::CharIndices;
use std::sync::OnceLock;

use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RawTokenizer, RemoveLongFilter, Stemmer,
    TextAnalyzer, Token, TokenFilter, TokenStream, Tokenizer,
};

/// The tokenizer name the text field is indexed with. Part of the index
/// schema: a new name (bump the number) rebuilds every index on open.
pub const ANALYZER_NAME: &str = "amos-en-4";

/// Tokens of this many bytes or more are dropped. A CJK bigram is at most
/// 8 bytes, so only a long run of other letters reaches it.
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

/// English stop-words: never a term, at index or query time, so a memory
/// that shares only these with a question is no lexical candidate, and a
/// question made only of them matches nothing lexically. Removed after the
/// compounds are joined (`log in` is still `login`, `on call` `oncall`).
/// Snowball's English list (its contractions as the tokenizer splits them:
/// `don't` → `don`, `t`) less `own` (`who owns billing`), `down` and `off`
/// (`the site is down`, `time off`), plus the modals and fillers a question
/// is phrased with (`can`, `will`, `must`, `us`, `also`, `just`, …). Matched
/// by stem: `doing` and `does` go as `do` does.
#[rustfmt::skip]
pub const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "against", "ain", "all", "also", "am", "an",
    "and", "any", "are", "aren", "as", "at", "be", "because", "been", "before", "being",
    "below", "between", "both", "but", "by", "can", "cannot", "could", "couldn", "d", "did",
    "didn", "do", "does", "doesn", "doing", "don", "during", "each", "few", "for", "from",
    "further", "had", "hadn", "has", "hasn", "have", "haven", "having", "he", "her", "here",
    "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "isn",
    "it", "its", "itself", "just", "let", "ll", "m", "me", "might", "mightn", "more", "most",
    "must", "mustn", "my", "myself", "needn", "no", "nor", "not", "now", "o", "of", "on",
    "once", "only", "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "re",
    "s", "same", "shall", "shan", "she", "should", "shouldn", "so", "some", "such", "t",
    "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these",
    "they", "this", "those", "through", "to", "too", "under", "until", "up", "us", "ve",
    "very", "was", "wasn", "we", "were", "weren", "what", "when", "where", "which", "while",
    "who", "whom", "why", "will", "with", "would", "wouldn", "y", "you", "your", "yours",
    "yourself", "yourselves",
];

/// The analyzer the index and every query use.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(Words::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(Stemmer::new(Language::English))
        .filter(Compounds)
        .filter(StopWords)
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

/// Whether the analyzer drops `word` as a stop-word (any case or
/// inflection of one of [`STOP_WORDS`]: `The`, `Doing`). The one list, for
/// whoever must judge what a question and a memory share beyond stop-words.
pub fn is_stop_word(word: &str) -> bool {
    let mut stem = TextAnalyzer::builder(RawTokenizer::default())
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(Stemmer::new(Language::English))
        .build();
    let mut s = stem.token_stream(word.trim());
    s.advance() && stop_stems().contains(&s.token().text)
}

/// One word through the English stemmer alone.
fn stem_of(stem: &mut TextAnalyzer, w: &str) -> String {
    let mut s = stem.token_stream(w);
    match s.advance() {
        true => s.token().text.clone(),
        false => w.to_owned(),
    }
}

fn english_stemmer() -> TextAnalyzer {
    TextAnalyzer::builder(RawTokenizer::default())
        .filter(Stemmer::new(Language::English))
        .build()
}

/// [`STOP_WORDS`] as the stemmer leaves them (`doing` → `do`, `only` →
/// `onli`): what [`StopWords`] compares a term with.
fn stop_stems() -> &'static HashSet<String> {
    static SET: OnceLock<HashSet<String>> = OnceLock::new();
    SET.get_or_init(|| {
        let mut stem = english_stemmer();
        STOP_WORDS.iter().map(|w| stem_of(&mut stem, w)).collect()
    })
}

/// Whether `text` is written mostly (of its letters) in the scripts
/// [`is_cjk`] names: recall then leans on its words, not the English
/// encoder (`recall::fuse::fuse_for`).
pub fn mostly_cjk(text: &str) -> bool {
    let (mut letters, mut cjk) = (0usize, 0usize);
    for c in text.chars().filter(|c| c.is_alphabetic()) {
        letters += 1;
        cjk += usize::from(is_cjk(c));
    }
    letters > 0 && 2 * cjk >= letters
}

/// Whether `c` is written in a script without spaces between words: Han
/// (Chinese characters, kanji), Hiragana, Katakana (full and half width),
/// Hangul, Bopomofo. A run of them is split into character bigrams.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF // Hangul Jamo
        | 0x2E80..=0x2FDF // CJK and Kangxi radicals
        | 0x3005..=0x3007 // 々 〆 〇
        | 0x3021..=0x3029 | 0x3038..=0x303C // Hangzhou numerals, 〻
        | 0x3040..=0x30FF // Hiragana, Katakana (ー)
        | 0x3100..=0x318F // Bopomofo, Hangul compatibility Jamo
        | 0x31A0..=0x31BF // Bopomofo extended
        | 0x31F0..=0x31FF // Katakana phonetic extensions
        | 0x3400..=0x4DBF // CJK extension A
        | 0x4E00..=0x9FFF // CJK unified ideographs
        | 0xA960..=0xA97F // Hangul Jamo extended A
        | 0xAC00..=0xD7FF // Hangul syllables, Jamo extended B
        | 0xF900..=0xFAFF // CJK compatibility ideographs
        | 0xFF66..=0xFFDC // half-width Katakana and Hangul
        | 0x20000..=0x3FFFF // CJK extensions B and later
    ) && c.is_alphanumeric()
}

/// The tokenizer: a word is a run of Unicode letters and digits, anything
/// else separates (as tantivy's `SimpleTokenizer`), except that a run of
/// [`is_cjk`] characters, written without spaces, becomes its overlapping
/// bigrams (`経費精算` → `経費`, `費精`, `精算`; a lone character is a term of
/// its own), and a CJK run inside a word splits it (`API連携` → `API`,
/// `連携`). Hiragana bigrams are terms like any: they hold verbs and
/// adjectives (`なくした`) as well as endings (`です`), and dropping them
/// lost more than it saved on the Japanese eval questions.
#[derive(Clone, Default)]
struct Words {
    token: Token,
}

impl Tokenizer for Words {
    type TokenStream<'a> = WordsStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> WordsStream<'a> {
        self.token.reset();
        WordsStream {
            text,
            chars: text.char_indices().peekable(),
            token: &mut self.token,
            run: None,
        }
    }
}

struct WordsStream<'a> {
    text: &'a str,
    chars: Peekable<CharIndices<'a>>,
    token: &'a mut Token,
    /// The CJK run being read, if any.
    run: Option<Run>,
}

/// A CJK run being split into bigrams: its last character read.
#[derive(Clone, Copy)]
struct Run {
    last: char,
    /// Byte offset of `last`.
    at: usize,
    /// Whether `last` was the second character of a bigram (a run of one
    /// character is a unigram).
    paired: bool,
}

impl WordsStream<'_> {
    fn emit(&mut self, from: usize, to: usize) -> bool {
        self.token.text.clear();
        self.token.text.push_str(&self.text[from..to]);
        self.token.offset_from = from;
        self.token.offset_to = to;
        self.token.position = self.token.position.wrapping_add(1);
        true
    }
}

impl TokenStream for WordsStream<'_> {
    fn advance(&mut self) -> bool {
        loop {
            if let Some(run) = self.run {
                match self.chars.peek().copied() {
                    Some((at, c)) if is_cjk(c) => {
                        self.chars.next();
                        self.run = Some(Run {
                            last: c,
                            at,
                            paired: true,
                        });
                        return self.emit(run.at, at + c.len_utf8());
                    }
                    _ => {
                        self.run = None;
                        if !run.paired {
                            return self.emit(run.at, run.at + run.last.len_utf8());
                        }
                        continue;
                    }
                }
            }
            let Some((at, c)) = self.chars.next() else {
                return false;
            };
            if !c.is_alphanumeric() {
                continue;
            }
            if is_cjk(c) {
                self.run = Some(Run {
                    last: c,
                    at,
                    paired: false,
                });
                continue;
            }
            let mut to = at + c.len_utf8();
            while let Some(&(o, d)) = self.chars.peek() {
                if !d.is_alphanumeric() || is_cjk(d) {
                    break;
                }
                to = o + d.len_utf8();
                self.chars.next();
            }
            return self.emit(at, to);
        }
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

/// Token filter dropping English stop-words (by stem, [`stop_stems`]).
#[derive(Clone)]
struct StopWords;

impl TokenFilter for StopWords {
    type Tokenizer<T: Tokenizer> = StopWordsFilter<T>;

    fn transform<T: Tokenizer>(self, tokenizer: T) -> StopWordsFilter<T> {
        StopWordsFilter { inner: tokenizer }
    }
}

#[derive(Clone)]
struct StopWordsFilter<T> {
    inner: T,
}

impl<T: Tokenizer> Tokenizer for StopWordsFilter<T> {
    type TokenStream<'a> = StopWordsStream<T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        StopWordsStream {
            tail: self.inner.token_stream(text),
            stops: stop_stems(),
        }
    }
}

struct StopWordsStream<S> {
    tail: S,
    stops: &'static HashSet<String>,
}

impl<S: TokenStream> TokenStream for StopWordsStream<S> {
    fn advance(&mut self) -> bool {
        while self.tail.advance() {
            if !self.stops.contains(&self.tail.token().text) {
                return true;
            }
        }
        false
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

/// The compounds by stem: first word → second word → the joined word.
type CompoundTable = HashMap<String, HashMap<String, String>>;

fn compound_table() -> &'static CompoundTable {
    static TABLE: OnceLock<CompoundTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut stem = english_stemmer();
        let mut one = |w: &str| stem_of(&mut stem, w);
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
    #[test]
    fn a_text_mostly_in_cjk_scripts_is_told_apart() {
        assert!(mostly_cjk("経費精算はどうするの") && !mostly_cjk("where is the Pleo card"));
        assert!(mostly_cjk("Pleoの経費精算の締め切り"));
        assert!(!mostly_cjk("") && !mostly_cjk("42 !"));
    }

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
        assert_eq!(analyze("roll the dice"), ["roll", "dice"]);
        // A word that starts a compound but is followed by another one.
        assert_eq!(analyze("set set up"), ["set", "setup"]);
        assert_eq!(analyze("back"), ["back"]);
        // A first word at the very end, and two first words in a row.
        assert_eq!(analyze("please roll"), ["pleas", "roll"]);
        assert_eq!(analyze("on the call"), ["call"]);
        assert_eq!(analyze("roll roll back"), ["roll", "rollback"]);
        assert_eq!(analyze("log out then back up"), ["logout", "backup"]);
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

    #[test]
    fn stop_words_are_dropped_after_the_compounds_are_joined() {
        assert_eq!(
            analyze("How do I log in to the VPN?"),
            ["login", "vpn"],
            "`log in` is joined before `in` (a stop-word) goes"
        );
        assert_eq!(analyze("we rolled it back"), ["roll", "back"]);
        assert_eq!(analyze("who is on call this week"), analyze("oncall week"));
        assert_eq!(analyze("who is on call this week").len(), 2);
        assert_eq!(analyze("shut it down"), ["shut", "down"]);
        assert_eq!(analyze("set up the backups"), ["setup", "backup"]);
        assert_eq!(
            analyze("who can fix a mistake in my paycheck"),
            ["fix", "mistak", "paycheck"]
        );
        assert_eq!(
            analyze("how do we guess which clients are about to leave us"),
            ["guess", "client", "leav"]
        );
        // Contractions as the tokenizer splits them, and inflected forms.
        assert_eq!(
            analyze("what's the deploy window? don't guess"),
            ["deploy", "window", "guess"]
        );
        assert_eq!(analyze("Doing THE things"), ["thing"]);
    }

    #[test]
    fn a_question_of_stop_words_alone_has_no_terms() {
        assert!(analyze("what is it and who has been doing this?").is_empty());
        assert!(analyze("How can we do that").is_empty());
        for w in STOP_WORDS {
            assert!(analyze(w).is_empty(), "{w:?} is a term");
        }
    }

    #[test]
    fn is_stop_word_is_the_analyzer_s_list() {
        for w in ["the", "The", "doing", "Does", "us", "what", "ourselves"] {
            assert!(is_stop_word(w), "{w:?}");
        }
        for w in [
            "payroll", "badge", "own", "owns", "down", "off", "may", "login", "",
        ] {
            assert!(!is_stop_word(w), "{w:?}");
            assert!(w.is_empty() || !analyze(w).is_empty(), "{w:?}");
        }
    }

    #[test]
    fn a_cjk_run_becomes_overlapping_bigrams() {
        assert_eq!(analyze("経費精算"), ["経費", "費精", "精算"]);
        // A lone character is a unigram; punctuation separates runs.
        assert_eq!(analyze("円、経費。"), ["円", "経費"]);
        // Katakana with its long-vowel mark; Hangul; Chinese.
        assert_eq!(analyze("サーバー"), ["サー", "ーバ", "バー"]);
        assert_eq!(analyze("경비 정산"), ["경비", "정산"]);
        assert_eq!(analyze("报销流程"), ["报销", "销流", "流程"]);
        // The same run, found from a query sharing one word with it.
        let memory = analyze("経費精算は月末までに山田さんへ提出してください");
        for t in analyze("経費精算") {
            assert!(memory.contains(&t), "{t:?} in {memory:?}");
        }
    }

    #[test]
    fn hiragana_makes_bigrams_like_any_cjk() {
        // A verb in hiragana (`なくした`, lost) is found by its bigrams.
        let memory = analyze("入館証をなくしたら総務に連絡");
        for t in analyze("なくした") {
            assert!(memory.contains(&t), "{t:?} in {memory:?}");
        }
        assert_eq!(analyze("Slack の ops"), ["slack", "の", "op"]);
        assert_eq!(analyze("ありがとう"), ["あり", "りが", "がと", "とう"]);
    }

    #[test]
    fn mixed_text_keeps_both_kinds_of_terms() {
        assert_eq!(
            analyze("API連携のdeploy手順"),
            ["api", "連携", "携の", "deploy", "手順"]
        );
        assert_eq!(
            analyze("Deploys are blocked: 本番環境へのデプロイは金曜禁止"),
            [
                "deploy", "block", "本番", "番環", "環境", "境へ", "への", "のデ", "デプ", "プロ",
                "ロイ", "イは", "は金", "金曜", "曜禁", "禁止",
            ]
        );
    }

    #[test]
    fn a_long_cjk_sentence_is_not_dropped() {
        let sentence = "経費精算の申請は毎月二十五日までに経理部の山田さんへ提出すること";
        assert!(sentence.len() > MAX_TOKEN_BYTES);
        let terms = analyze(sentence);
        assert!(terms.contains(&"経費".to_owned()), "{terms:?}");
        assert!(terms.contains(&"山田".to_owned()), "{terms:?}");
        assert!(terms.contains(&"提出".to_owned()), "{terms:?}");
        // Long garbage in other letters is still dropped.
        let long = "x".repeat(MAX_TOKEN_BYTES + 1);
        assert_eq!(analyze(&format!("経費 {long}")), ["経費"]);
    }
}
