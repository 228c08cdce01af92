//! Interaction signing (ADR-12, REST.md "Interactions"): each application
//! has its own Ed25519 key pair, kept in the registry as a 32-byte seed.
//! An HTTP delivery carries `X-Signature-Ed25519` (hex of the 64-byte
//! signature over the timestamp's bytes followed by the body) and
//! `X-Signature-Timestamp` (unix seconds). The public key, in hex, is the
//! application's `verify_key`.

use ed25519_dalek::{Signer, SigningKey};

pub const SIGNATURE_HEADER: &str = "X-Signature-Ed25519";
pub const TIMESTAMP_HEADER: &str = "X-Signature-Timestamp";

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// The signature of `timestamp || body`, hex (128 characters).
pub fn sign(seed: &[u8; 32], timestamp: &str, body: &[u8]) -> String {
    let key = SigningKey::from_bytes(seed);
    let mut msg = Vec::with_capacity(timestamp.len() + body.len());
    msg.extend_from_slice(timestamp.as_bytes());
    msg.extend_from_slice(body);
    hex(&key.sign(&msg).to_bytes())
}

/// The public key (hex, 64 characters): `verify_key`.
pub fn public_key_hex(seed: &[u8; 32]) -> String {
    hex(SigningKey::from_bytes(seed).verifying_key().as_bytes())
}

/// The two headers of a signed delivery.
pub fn headers(signature: &str, timestamp: &str) -> Vec<(String, String)> {
    vec![
        ("Content-Type".into(), "application/json".into()),
        (SIGNATURE_HEADER.into(), signature.into()),
        (TIMESTAMP_HEADER.into(), timestamp.into()),
    ]
}

/// Unix seconds, as the timestamp header carries them.
pub fn timestamp_now() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        .to_string()
}

/// A well-formed signature that does not verify (the endpoint check's
/// deliberately bad one): the first byte's low bit flipped.
pub fn corrupt(signature_hex: &str) -> String {
    let mut s: Vec<u8> = signature_hex.bytes().collect();
    if let Some(c) = s.get_mut(1) {
        let v = (*c as char).to_digit(16).unwrap_or(0) ^ 1;
        *c = b"0123456789abcdef"[v as usize];
    }
    String::from_utf8(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signature, Verifier, VerifyingKey};

    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 8032 test 1: the empty message under its known key.
    #[test]
    fn rfc8032_vector() {
        let seed: [u8; 32] =
            unhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
                .try_into()
                .unwrap();
        assert_eq!(
            public_key_hex(&seed),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
        );
        assert_eq!(
            sign(&seed, "", b""),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
    }

    #[test]
    fn signatures_cover_timestamp_then_body_and_corrupt_ones_fail() {
        let seed = [7u8; 32];
        let sig = sign(&seed, "1700000000", br#"{"type":1}"#);
        assert_eq!(sig.len(), 128);
        let key =
            VerifyingKey::from_bytes(&unhex(&public_key_hex(&seed)).try_into().unwrap()).unwrap();
        let s = Signature::from_slice(&unhex(&sig)).unwrap();
        assert!(key.verify(br#"1700000000{"type":1}"#, &s).is_ok());
        assert!(key.verify(br#"1700000001{"type":1}"#, &s).is_err());
        let bad = corrupt(&sig);
        assert_eq!(bad.len(), 128);
        assert_ne!(bad, sig);
        let b = Signature::from_slice(&unhex(&bad)).unwrap();
        assert!(key.verify(br#"1700000000{"type":1}"#, &b).is_err());
    }
}
