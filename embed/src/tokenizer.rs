//! BERT's uncased WordPiece tokenizer, read from a `tokenizer.json`.
//!
//! Owns: the normaliser (clean control characters, space out CJK, strip
//! accents, lower-case), the pre-tokenizer (split on whitespace, isolate
//! punctuation) and greedy longest-match-first WordPiece with `##`
//! continuations, as Hugging Face's `BertNormalizer`, `BertPreTokenizer` and
//! `WordPiece` do. Never: special tokens (a static model adds none), any other
//! tokenizer family (a `tokenizer.json` that is not WordPiece is refused, not
//! guessed at), or panics on the bytes of a user's file.

use serde::Deserialize;
use unicode_general_category::{GeneralCategory, get_general_category};
use unicode_normalization::char::decompose_canonical;

use crate::ModelError;
use crate::vocab::{BuiltinVocab, OwnedVocab, Vocab};

/// The parts of `tokenizer.json` this reader understands.
#[derive(Deserialize)]
struct TokenizerJson {
    normalizer: Option<NormalizerJson>,
    pre_tokenizer: Option<TypeOnly>,
    model: ModelJson,
}

#[derive(Deserialize)]
struct TypeOnly {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct NormalizerJson {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default = "yes")]
    clean_text: bool,
    #[serde(default = "yes")]
    handle_chinese_chars: bool,
    strip_accents: Option<bool>,
    #[serde(default = "yes")]
    lowercase: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct ModelJson {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default, deserialize_with = "vocab")]
    vocab: OwnedVocab,
    #[serde(default = "unk")]
    unk_token: String,
    #[serde(default = "hashes")]
    continuing_subword_prefix: String,
    #[serde(default = "hundred")]
    max_input_chars_per_word: usize,
}

fn unk() -> String {
    "[UNK]".into()
}
fn hashes() -> String {
    "##".into()
}
fn hundred() -> usize {
    100
}

/// Reads the vocabulary object into a table sized for a BERT vocabulary
/// up front (serde's own map reader starts empty and grows ~15 times).
fn vocab<'de, D: serde::Deserializer<'de>>(d: D) -> Result<OwnedVocab, D::Error> {
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = OwnedVocab;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of token to id")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<OwnedVocab, A::Error> {
            let mut out = OwnedVocab::with_capacity_and_hasher(32_768, Default::default());
            while let Some((token, id)) = map.next_entry::<String, u32>()? {
                out.insert(token, id);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Visit)
}

/// A WordPiece tokenizer with BERT's normaliser and pre-tokenizer.
#[derive(Clone, Debug)]
pub struct WordPiece {
    vocab: Vocab,
    unk: Option<u32>,
    prefix: String,
    max_chars: usize,
    clean_text: bool,
    chinese: bool,
    strip_accents: bool,
    lowercase: bool,
}

impl WordPiece {
    /// Reads a Hugging Face `tokenizer.json` of a BERT-style WordPiece model.
    pub fn from_json(bytes: &[u8]) -> Result<Self, ModelError> {
        Self::from_json_with_vocab(bytes, None)
    }

    /// A `tokenizer.json` whose vocabulary is given apart, laid out at build
    /// time: how the built-in model is compiled in.
    pub(crate) fn from_json_with_vocab(
        bytes: &[u8],
        builtin: Option<BuiltinVocab>,
    ) -> Result<Self, ModelError> {
        let json: TokenizerJson = serde_json::from_slice(bytes)
            .map_err(|e| ModelError::Tokenizer(format!("not a tokenizer.json ({e})")))?;
        let kind = json.model.kind.as_deref().unwrap_or("WordPiece");
        if kind != "WordPiece" {
            return Err(ModelError::Tokenizer(format!(
                "model type {kind} is not supported (amos reads WordPiece tokenizers)"
            )));
        }
        if let Some(pre) = &json.pre_tokenizer
            && pre.kind != "BertPreTokenizer"
        {
            return Err(ModelError::Tokenizer(format!(
                "pre-tokenizer {} is not supported (amos reads BertPreTokenizer)",
                pre.kind
            )));
        }
        let (clean_text, chinese, strip_accents, lowercase) = match &json.normalizer {
            None => (false, false, false, false),
            Some(n) if n.kind == "BertNormalizer" => (
                n.clean_text,
                n.handle_chinese_chars,
                n.strip_accents.unwrap_or(n.lowercase),
                n.lowercase,
            ),
            Some(n) => {
                return Err(ModelError::Tokenizer(format!(
                    "normalizer {} is not supported (amos reads BertNormalizer)",
                    n.kind
                )));
            }
        };
        let model = json.model;
        let vocab = match builtin {
            Some(b) => Vocab::Builtin(b),
            None => Vocab::Owned(model.vocab),
        };
        if vocab.is_empty() {
            return Err(ModelError::Tokenizer("the vocabulary is empty".into()));
        }
        Ok(WordPiece {
            unk: vocab.get(model.unk_token.as_str()),
            vocab,
            prefix: model.continuing_subword_prefix,
            max_chars: model.max_input_chars_per_word,
            clean_text,
            chinese,
            strip_accents,
            lowercase,
        })
    }

    /// The largest token id, if any (a model's table must cover it).
    pub fn max_id(&self) -> Option<u32> {
        self.vocab.max_id()
    }

    /// The id of the unknown-word token, if the vocabulary has one.
    pub fn unk_id(&self) -> Option<u32> {
        self.unk
    }

    /// The id of one vocabulary entry.
    pub fn id(&self, token: &str) -> Option<u32> {
        self.vocab.get(token)
    }

    /// The normalised text: control characters dropped, whitespace made
    /// spaces, CJK ideographs spaced out, accents stripped, lower-cased.
    pub fn normalize(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            if self.clean_text && (c == '\0' || c == '\u{fffd}' || is_control(c)) {
                continue;
            }
            if self.clean_text && is_whitespace(c) {
                out.push(' ');
            } else if self.chinese && is_cjk(c) {
                out.push(' ');
                out.push(c);
                out.push(' ');
            } else if self.strip_accents {
                decompose_canonical(c, |d| {
                    if get_general_category(d) != GeneralCategory::NonspacingMark {
                        out.push(d);
                    }
                });
            } else {
                out.push(c);
            }
        }
        if self.lowercase {
            // Character by character, as Hugging Face does: no final-sigma rule.
            out = out.chars().flat_map(char::to_lowercase).collect();
        }
        out
    }

    /// The words of a normalised text: split on whitespace, each punctuation
    /// character a word of its own.
    pub fn words(normalized: &str) -> Vec<&str> {
        let mut words = Vec::new();
        for chunk in normalized.split(char::is_whitespace) {
            let mut start = 0;
            for (i, c) in chunk.char_indices() {
                if is_punctuation(c) {
                    if start < i {
                        words.push(&chunk[start..i]);
                    }
                    words.push(&chunk[i..i + c.len_utf8()]);
                    start = i + c.len_utf8();
                }
            }
            if start < chunk.len() {
                words.push(&chunk[start..]);
            }
        }
        words
    }

    /// The token ids of a text, `[UNK]` included where a word has no pieces.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let normalized = self.normalize(text);
        let mut ids = Vec::new();
        for word in Self::words(&normalized) {
            self.word_pieces(word, &mut ids);
        }
        ids
    }

    /// Greedy longest-match-first pieces of one word; the whole word is the
    /// unknown token when any part of it has no piece.
    fn word_pieces(&self, word: &str, ids: &mut Vec<u32>) {
        let before = ids.len();
        if word.chars().count() > self.max_chars {
            ids.extend(self.unk);
            return;
        }
        let mut start = 0;
        let mut piece = String::with_capacity(word.len() + self.prefix.len());
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while start < end {
                piece.clear();
                if start > 0 {
                    piece.push_str(&self.prefix);
                }
                piece.push_str(&word[start..end]);
                if let Some(id) = self.vocab.get(piece.as_str()) {
                    found = Some(id);
                    break;
                }
                // Step back one character, never into the middle of one.
                end = word[..end]
                    .char_indices()
                    .next_back()
                    .map_or(start, |(i, _)| i);
            }
            match found {
                Some(id) => {
                    ids.push(id);
                    start = end;
                }
                None => {
                    ids.truncate(before);
                    ids.extend(self.unk);
                    return;
                }
            }
        }
    }
}

fn is_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
        || get_general_category(c) == GeneralCategory::SpaceSeparator
}

fn is_control(c: char) -> bool {
    if matches!(c, '\t' | '\n' | '\r') {
        return false;
    }
    matches!(
        get_general_category(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::Unassigned
            | GeneralCategory::PrivateUse
            | GeneralCategory::Surrogate
    )
}

fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(
            get_general_category(c),
            GeneralCategory::ConnectorPunctuation
                | GeneralCategory::DashPunctuation
                | GeneralCategory::OpenPunctuation
                | GeneralCategory::ClosePunctuation
                | GeneralCategory::InitialPunctuation
                | GeneralCategory::FinalPunctuation
                | GeneralCategory::OtherPunctuation
        )
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> WordPiece {
        let vocab = [
            "[PAD]", "[UNK]", "un", "##aff", "##able", "cafe", "hello", ",", "!", "world", "a",
            "##b", "中", "-",
        ];
        let vocab: serde_json::Map<String, serde_json::Value> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), serde_json::json!(i)))
            .collect();
        let json = serde_json::json!({
            "normalizer": {"type": "BertNormalizer", "clean_text": true,
                "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                "vocab": vocab},
        });
        WordPiece::from_json(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn accents_are_stripped_and_case_folded() {
        let t = tiny();
        assert_eq!(t.normalize("Café ÉCOLE naïve"), "cafe ecole naive");
        assert_eq!(t.encode("CAFÉ"), vec![5]);
        assert_eq!(t.normalize("ΟΔΟΣ"), "οδοσ");
    }

    #[test]
    fn punctuation_is_a_word_of_its_own() {
        assert_eq!(
            WordPiece::words("hello,world! a-b «x»"),
            vec!["hello", ",", "world", "!", "a", "-", "b", "«", "x", "»"]
        );
        assert_eq!(tiny().encode("Hello,world!"), vec![6, 7, 9, 8]);
    }

    #[test]
    fn continuation_pieces_are_longest_match_first() {
        assert_eq!(tiny().encode("unaffable"), vec![2, 3, 4]);
        assert_eq!(tiny().encode("abb"), vec![10, 11, 11]);
    }

    #[test]
    fn a_word_without_pieces_is_one_unknown_token() {
        // "unaffz": "un" "##aff" match, "z" does not: the whole word is [UNK].
        assert_eq!(tiny().encode("unaffz hello"), vec![1, 6]);
        let long = "a".repeat(101);
        assert_eq!(tiny().encode(&long), vec![1]);
    }

    #[test]
    fn control_characters_go_and_cjk_is_spaced() {
        let t = tiny();
        assert_eq!(t.normalize("a\u{0}b\u{200b}c\td"), "abc d");
        assert_eq!(t.encode("hello中world"), vec![6, 12, 9]);
    }

    #[test]
    fn multibyte_words_without_pieces_do_not_panic() {
        assert_eq!(tiny().encode("ßπ€"), vec![1]);
        assert!(tiny().encode("").is_empty());
    }

    #[test]
    fn other_tokenizer_families_are_refused() {
        let json = br#"{"normalizer":null,"pre_tokenizer":{"type":"Metaspace"},"model":{"type":"Unigram","vocab":{}}}"#;
        let err = WordPiece::from_json(json).unwrap_err().to_string();
        assert!(err.contains("Unigram"), "{err}");
        assert!(WordPiece::from_json(b"{").is_err());
    }
}
