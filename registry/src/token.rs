//! Bot tokens: `b64(app id) "." b64(6 random bytes) "." b64(27 random bytes)`
//! (URL-safe base64, no padding), like Discord's. Only a salted SHA-256 is
//! stored; the app id in the first segment tells which row to check.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::error::RegistryError;

pub const SALT_LEN: usize = 16;
pub const HASH_LEN: usize = 32;
/// Real tokens are ~75 bytes; anything far longer is rejected before hashing.
const MAX_TOKEN_LEN: usize = 256;

pub fn random_bytes<const N: usize>() -> Result<[u8; N], RegistryError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| RegistryError::Random(e.to_string()))?;
    Ok(b)
}

/// A fresh token for `app_id`.
pub fn generate(app_id: u64) -> Result<String, RegistryError> {
    let mid = random_bytes::<6>()?;
    let secret = random_bytes::<27>()?;
    Ok(format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(app_id.to_string()),
        URL_SAFE_NO_PAD.encode(mid),
        URL_SAFE_NO_PAD.encode(secret)
    ))
}

pub fn hash(salt: &[u8], token: &str) -> [u8; HASH_LEN] {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(token.as_bytes());
    h.finalize().into()
}

/// Strips an optional `Bot ` prefix (callers should, but be lenient).
pub fn strip_prefix(token: &str) -> &str {
    token.strip_prefix("Bot ").unwrap_or(token)
}

/// The application id a token claims, or None if it is not token-shaped.
/// Never panics, whatever the input.
pub fn parse_app_id(token: &str) -> Option<u64> {
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return None;
    }
    let mut parts = token.split('.');
    let (first, mid, last) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || mid.is_empty() || last.is_empty() {
        return None;
    }
    let digits = URL_SAFE_NO_PAD.decode(first).ok()?;
    // Canonical decimal only: 1..=20 ASCII digits, no leading zero.
    if digits.is_empty()
        || digits.len() > 20
        || digits[0] == b'0'
        || !digits.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    std::str::from_utf8(&digits).ok()?.parse::<u64>().ok()
}

/// Constant-time equality for equal-length digests (length is public).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Whether `token` matches the stored salt and hash.
pub fn verify(token: &str, salt: &[u8], stored: &[u8]) -> bool {
    ct_eq(&hash(salt, token), stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_token_shape_and_id() {
        let id = 175_928_847_299_117_063;
        let t = generate(id).unwrap();
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[1].len(), 8);
        assert_eq!(parts[2].len(), 36);
        assert_eq!(parse_app_id(&t), Some(id));
        assert_eq!(parse_app_id(strip_prefix(&format!("Bot {t}"))), Some(id));
        assert_ne!(generate(id).unwrap(), t);
    }

    #[test]
    fn malformed_tokens_parse_to_none() {
        let enc = |s: &str| URL_SAFE_NO_PAD.encode(s);
        let bad = [
            String::new(),
            ".".into(),
            "..".into(),
            "a.b.c".into(),
            "ñ.ü.ö".into(),
            "🦀🦀.🦀.🦀".into(),
            format!("{}.x", enc("123")),
            format!("{}.x.y.z", enc("123")),
            format!("{}..y", enc("123")),
            format!("{}.x.", enc("123")),
            format!("{}.x.y", enc("0123")),
            format!("{}.x.y", enc("-5")),
            format!("{}.x.y", enc("+5")),
            format!("{}.x.y", enc("99999999999999999999")),
            format!("{}.x.y", enc("12a")),
            format!("{}==.x.y", enc("1")),
            format!("{}.x.{}", enc("1"), "y".repeat(300)),
        ];
        for b in &bad {
            assert_eq!(parse_app_id(b), None, "{b:?}");
        }
        assert_eq!(
            parse_app_id(&format!("{}.x.y", enc("18446744073709551615"))),
            Some(u64::MAX)
        );
    }

    #[test]
    fn verify_and_ct_eq() {
        let salt = [7u8; SALT_LEN];
        let h = hash(&salt, "a.b.c");
        assert!(verify("a.b.c", &salt, &h));
        assert!(!verify("a.b.d", &salt, &h));
        assert!(!verify("a.b.c", &[8u8; SALT_LEN], &h));
        assert!(!ct_eq(&h, &h[..31]));
    }
}
