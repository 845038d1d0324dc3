//! Identifiers: `ses_`, `run_`, `msg_`, `op_` plus a time-sortable random suffix.
//!
//! Every id that arrives from outside (command line, bundle, state file) is checked with
//! [`validate_id`] before any path is built from it, so `..`, `/` or a NUL can never reach the
//! filesystem.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crate::error::{Error, Result};

/// The kinds of id the runtime mints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Session,
    Run,
    Message,
    Operation,
}

impl IdKind {
    pub fn prefix(self) -> &'static str {
        match self {
            IdKind::Session => "ses_",
            IdKind::Run => "run_",
            IdKind::Message => "msg_",
            IdKind::Operation => "op_",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            IdKind::Session => "session id",
            IdKind::Run => "run id",
            IdKind::Message => "message id",
            IdKind::Operation => "operation id",
        }
    }
}

/// Crockford base32, lowercase: sorts like the numbers it encodes.
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Mints a new id: prefix, 10 characters of milliseconds since the epoch, 16 random characters.
///
/// Ids minted later sort after earlier ones (to the millisecond; within one process a counter
/// keeps them strictly increasing), and 80 random bits make collisions across processes and
/// runners negligible — which is why a resumed run can never reuse a message id.
pub fn new_id(kind: IdKind) -> String {
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    let now = u64::try_from(crate::clock::now_millis()).unwrap_or(0);
    // Strictly increasing within this process even if the clock stalls or steps back.
    let ms = LAST_MS
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(now.max(last + 1))
        })
        .map(|last| now.max(last + 1))
        .unwrap_or(now);
    let mut out = String::with_capacity(kind.prefix().len() + 26);
    out.push_str(kind.prefix());
    for i in (0..10).rev() {
        out.push(ALPHABET[((ms >> (i * 5)) & 31) as usize] as char);
    }
    let random = test_seeded_bytes().unwrap_or_else(random_bytes::<10>);
    let mut bits: u128 = 0;
    for b in random {
        bits = (bits << 8) | u128::from(b);
    }
    for i in (0..16).rev() {
        out.push(ALPHABET[((bits >> (i * 5)) & 31) as usize] as char);
    }
    out
}

/// With the `failpoints` feature (test builds only) and `KXEN_TEST_ID_SEED` set, the random part
/// of the next id: SHA-256 of the seed and a per-process counter, so a test whose commands get
/// distinct seeds (and the fixed clock of [`crate::clock`]) sees the same ids on every run.
/// Always `None` in release builds.
fn test_seeded_bytes() -> Option<[u8; 10]> {
    #[cfg(feature = "failpoints")]
    {
        static SEED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let seed = SEED
            .get_or_init(|| std::env::var("KXEN_TEST_ID_SEED").ok())
            .as_ref()?;
        let n = COUNT.fetch_add(1, Ordering::SeqCst);
        let digest = crate::hash::sha256(format!("{seed}\n{n}").as_bytes());
        let mut out = [0u8; 10];
        out.copy_from_slice(&digest[..10]);
        Some(out)
    }
    #[cfg(not(feature = "failpoints"))]
    None
}

/// Fills `N` bytes (at most 32) from the operating system's random source (`getrandom`).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    const { assert!(N <= 32, "random_bytes gives at most 32 bytes") };
    let mut buf = [0u8; N];
    if getrandom::fill(&mut buf).is_ok() {
        return buf;
    }
    // No random source at all (a very odd sandbox): time, pid and thread mixed through SHA-256,
    // still unique enough for ids that also carry the time.
    let seed = format!(
        "{:?}{}{:?}",
        SystemTime::now(),
        std::process::id(),
        std::thread::current().id()
    );
    let digest = crate::hash::sha256(seed.as_bytes());
    buf.copy_from_slice(&digest[..N]);
    buf
}

/// Checks an id that came from outside: `^[A-Za-z0-9_-]{1,128}$`.
pub fn validate_id(id: &str, what: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "invalid {what} {id:?}: ids are 1 to 128 characters of A-Z, a-z, 0-9, '_' and '-'"
        )))
    }
}

/// Checks an id and that it has the prefix of `kind` (`ses_…` for a session).
pub fn validate_kind(id: &str, kind: IdKind) -> Result<()> {
    validate_id(id, kind.noun())?;
    if !id.starts_with(kind.prefix()) {
        return Err(Error::invalid(format!(
            "invalid {} {id:?}: expected an id starting with {}",
            kind.noun(),
            kind.prefix()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn minted_ids_are_valid_sorted_and_unique() {
        let ids: Vec<String> = (0..200).map(|_| new_id(IdKind::Message)).collect();
        for id in &ids {
            validate_kind(id, IdKind::Message).unwrap();
            assert_eq!(id.len(), 4 + 26);
        }
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids);
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len());
    }

    /// The id format, pinned: prefix, 10 Crockford characters of the milliseconds, 16 random.
    #[test]
    fn id_format_is_prefix_time_and_random() {
        let before = crate::clock::now_millis() as u64;
        let id = new_id(IdKind::Operation);
        let body = id.strip_prefix(IdKind::Operation.prefix()).unwrap();
        assert_eq!(body.len(), 26);
        assert!(body.bytes().all(|b| ALPHABET.contains(&b)), "{id}");
        let ms = body[..10].bytes().fold(0u64, |acc, b| {
            (acc << 5) | ALPHABET.iter().position(|&a| a == b).unwrap() as u64
        });
        assert!(
            ms >= before && ms < before + 60_000,
            "{id}: {ms} vs {before}"
        );
        let a = random_bytes::<12>();
        let b = random_bytes::<12>();
        assert_ne!(a, b, "80+ random bits never repeat");
    }

    #[test]
    fn dangerous_ids_are_refused() {
        for bad in [
            "",
            "..",
            "a/b",
            "../x",
            "a b",
            "é",
            "a\0b",
            &"a".repeat(129),
        ] {
            assert!(validate_id(bad, "id").is_err(), "{bad:?} was accepted");
        }
        validate_id(&"a".repeat(128), "id").unwrap();
        assert!(validate_kind("run_x", IdKind::Session).is_err());
    }

    proptest! {
        #[test]
        fn validation_never_accepts_a_path_separator(s in ".*") {
            if validate_id(&s, "id").is_ok() {
                prop_assert!(!s.contains('/') && !s.contains('.') && !s.is_empty());
            }
        }
    }
}
