//! The convergence digest: one hash over a set of signed facts, independent
//! of the order they are fed in. Two nodes holding the same replicated facts
//! print the same digest.

/// Accumulates fact encodings; order does not matter, duplicates count once.
#[derive(Debug, Default, Clone)]
pub struct Digest {
    hashes: Vec<[u8; 32]>,
}

impl Digest {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one fact's wire encoding.
    pub fn add(&mut self, fact_bytes: &[u8]) {
        self.hashes.push(*blake3::hash(fact_bytes).as_bytes());
    }

    /// `(hex digest, number of distinct facts)`.
    pub fn finish(self) -> (String, usize) {
        let (d, n) = self.finish_bytes();
        (to_hex(&d), n)
    }

    /// `(digest, number of distinct facts)`: the bytes a sync session's
    /// `Digest` message carries.
    pub fn finish_bytes(mut self) -> ([u8; 32], usize) {
        self.hashes.sort_unstable();
        self.hashes.dedup();
        let mut h = blake3::Hasher::new();
        h.update(b"amos-digest-v1\0");
        for x in &self.hashes {
            h.update(x);
        }
        (*h.finalize().as_bytes(), self.hashes.len())
    }
}

/// A digest as `amos digest` prints it (lowercase hex).
pub fn to_hex(d: &[u8; 32]) -> String {
    blake3::Hash::from_bytes(*d).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_duplicates_do_not_matter() {
        let mut a = Digest::new();
        let mut b = Digest::new();
        for x in [b"one".as_slice(), b"two", b"three"] {
            a.add(x);
        }
        for x in [b"three".as_slice(), b"one", b"two", b"one"] {
            b.add(x);
        }
        assert_eq!(a.finish(), b.clone().finish());
        let mut c = Digest::new();
        c.add(b"one");
        assert_ne!(c.finish().0, b.finish().0);
    }
}
