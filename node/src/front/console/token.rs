//! The console's access token: 32 random bytes as hex in
//! `<home>/console.token` (mode 0600), made by `amos init` or, for a home
//! made before the console existed, on first use; and the CSRF token derived
//! from it.
//!
//! Must never: print or log the token except where the operator asked for
//! the console's URL; compare tokens in time that depends on their content.

use std::path::PathBuf;

use rand::RngExt;

use crate::error::{NodeError, Result};
use crate::home::{Home, write_atomic};

/// Where the token lives.
pub fn path(home: &Home) -> PathBuf {
    home.root().join("console.token")
}

/// The token, made if the home has none yet.
pub fn ensure(home: &Home) -> Result<String> {
    let p = path(home);
    match std::fs::read_to_string(&p) {
        Ok(t) if valid(t.trim()) => return Ok(t.trim().to_owned()),
        Ok(_) => {
            return Err(NodeError::Corrupt(format!(
                "{} is not a console token (delete it to make a new one)",
                p.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(NodeError::io(format!("reading {}", p.display()))(e)),
    }
    let bytes: [u8; 32] = rand::rng().random();
    let token = data_encoding::HEXLOWER.encode(&bytes);
    write_atomic(&p, format!("{token}\n").as_bytes(), 0o600)?;
    Ok(token)
}

fn valid(t: &str) -> bool {
    t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The CSRF token that state-changing requests carry: a keyed hash of the
/// access token (so it is stable for the token's life and reveals nothing
/// of it).
pub fn csrf_of(token: &str) -> String {
    let key = blake3::derive_key("amos console csrf v1", token.as_bytes());
    data_encoding::HEXLOWER.encode(&blake3::keyed_hash(&key, b"csrf").as_bytes()[..16])
}

/// Compare in time that depends only on the lengths.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_made_once_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let a = ensure(&home).unwrap();
        assert!(valid(&a));
        assert_eq!(ensure(&home).unwrap(), a);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path(&home)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_ne!(csrf_of(&a), a);
        assert_eq!(csrf_of(&a), csrf_of(&a));
        assert!(same(&a, &a) && !same(&a, &csrf_of(&a)) && !same("ab", "ac"));
    }
}
