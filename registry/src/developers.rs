//! Developer accounts (issue 29), written once for both backends as
//! `crate::members` is: a backend implements [`DeveloperStore`], one method
//! per statement; the checks, the password hashing and the order of the
//! steps are here.
//!
//! Passwords are kept as argon2id PHC strings
//! (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`): argon2's
//! `Params::default()`, which is OWASP's recommended minimum for argon2id
//! (19 MiB of memory, 2 passes, 1 lane), with a 16-byte salt from the
//! operating system's random source. A password is never stored, logged
//! or put in an error message. Hashing and verifying (tens of
//! milliseconds each) run before or after the database call, never inside
//! a transaction or under the registry's lock.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use crate::apps::{require_application, AppStore};
use crate::model::*;
use crate::validate::{check_developer_name, check_intents_of, check_password, MAX_PASSWORD_BYTES};
use crate::{error::RegistryError, error::Result, snowflake, token};

/// The statements behind the developer operations.
pub(crate) trait DeveloperStore: AppStore {
    fn developer(&mut self, id: u64) -> Result<Option<Developer>>;
    /// The developer of this name and their password hash.
    fn credentials(&mut self, name: &str) -> Result<Option<(Developer, String)>>;
    fn insert_developer(&mut self, developer: &Developer, password_hash: &str) -> Result<()>;
    /// False if there is no developer of this name.
    fn set_password_hash(&mut self, name: &str, password_hash: &str) -> Result<bool>;
    /// The developer and their ownerships; false if there was none.
    fn delete_developer(&mut self, name: &str) -> Result<bool>;
    /// Every developer, by id.
    fn developers(&mut self) -> Result<Vec<Developer>>;
    /// Nothing if it is already owned by them.
    fn insert_ownership(&mut self, developer_id: u64, app_id: u64) -> Result<()>;
    fn delete_ownership(&mut self, developer_id: u64, app_id: u64) -> Result<bool>;
    fn owns(&mut self, developer_id: u64, app_id: u64) -> Result<bool>;
    /// The developer's applications, by id.
    fn owned_applications(&mut self, developer_id: u64) -> Result<Vec<Application>>;
    /// Every ownership of the application (it is being deleted).
    fn delete_ownerships_of_app(&mut self, app_id: u64) -> Result<()>;
    fn set_requested_intents(&mut self, app_id: u64, bits: u64) -> Result<()>;
    /// Applications with `requested_intents & !approved_intents != 0`, by id.
    fn pending_intent_requests(&mut self) -> Result<Vec<Application>>;
}

/// Verified in place of a real hash when the name is unknown, so a sign-in
/// takes as long whether or not the name exists. The hash of a random
/// password nobody knows, with the same parameters as every stored one.
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$ugZOigtib5kie00iIzkMxQ$\
                          ej1fuHOaCJne1TYzn8m86td2oqaD9DMBhlV6Gkg+CGo";

fn hasher() -> Argon2<'static> {
    // Argon2id, v0x13, m=19456 KiB, t=2, p=1.
    Argon2::default()
}

/// The argon2id PHC string of `password` with a fresh random salt.
pub(crate) fn hash_password(password: &str) -> Result<String> {
    let salt_bytes = token::random_bytes::<16>()?;
    let salt = SaltString::encode_b64(&salt_bytes)
        .map_err(|e| RegistryError::Random(format!("password salt: {e}")))?;
    hasher()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| RegistryError::Storage(format!("hashing a password: {e}").into()))
}

/// Whether `password` matches the PHC string `hash`; false for a hash that
/// does not parse.
pub(crate) fn verify_password(hash: &str, password: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(parsed) => hasher()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// Checks a new developer's name and password and hashes the password
/// (before any transaction).
pub(crate) fn prepare(name: &str, password: &str) -> Result<String> {
    check_developer_name(name)?;
    check_password(password)?;
    hash_password(password)
}

/// Checks a new password and hashes it.
pub(crate) fn prepare_password(password: &str) -> Result<String> {
    check_password(password)?;
    hash_password(password)
}

/// Whether a sign-in with this password is worth a database read: an
/// over-long password is refused at once (its length is no secret of the
/// name's).
pub(crate) fn sign_in_allowed(password: &str) -> bool {
    password.len() <= MAX_PASSWORD_BYTES
}

/// The end of a sign-in, after the read: the developer if the password
/// matches their hash. For an unknown name the dummy hash is verified all
/// the same, so the time taken does not tell names apart.
pub(crate) fn finish_sign_in(
    found: Option<(Developer, String)>,
    password: &str,
) -> Option<Developer> {
    match found {
        Some((developer, hash)) => verify_password(&hash, password).then_some(developer),
        None => {
            let _ = verify_password(DUMMY_HASH, password);
            None
        }
    }
}

pub(crate) fn create<S: DeveloperStore>(
    s: &mut S,
    name: &str,
    password_hash: &str,
) -> Result<Developer> {
    check_developer_name(name)?;
    if s.credentials(name)?.is_some() {
        return Err(RegistryError::Taken {
            what: "developer name",
            name: name.to_owned(),
        });
    }
    let developer = Developer {
        id: snowflake::global().next_id(),
        name: name.to_owned(),
        created_at_ms: snowflake::unix_ms_now(),
    };
    s.insert_developer(&developer, password_hash)?;
    Ok(developer)
}

fn require_developer<S: DeveloperStore>(s: &mut S, id: u64) -> Result<Developer> {
    s.developer(id)?.ok_or(RegistryError::NotFound {
        what: "developer",
        id,
    })
}

pub(crate) fn own<S: DeveloperStore>(s: &mut S, developer_id: u64, app_id: u64) -> Result<()> {
    require_developer(s, developer_id)?;
    require_application(s, app_id)?;
    s.insert_ownership(developer_id, app_id)
}

pub(crate) fn applications_of<S: DeveloperStore>(
    s: &mut S,
    developer_id: u64,
) -> Result<Vec<Application>> {
    s.owned_applications(developer_id)
}

/// Replaces the application's request; bits already approved are fine.
pub(crate) fn request_intents<S: DeveloperStore>(
    s: &mut S,
    app_id: u64,
    bits: u64,
) -> Result<Application> {
    check_intents_of("requested", bits)?;
    require_application(s, app_id)?;
    s.set_requested_intents(app_id, bits)?;
    require_application(s, app_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dummy_hash_has_the_stored_hashes_parameters() {
        let real = hash_password("correct horse battery").unwrap();
        let (real, dummy) = (
            PasswordHash::new(&real).unwrap(),
            PasswordHash::new(DUMMY_HASH).unwrap(),
        );
        assert_eq!(dummy.algorithm, real.algorithm);
        assert_eq!(dummy.version, real.version);
        assert_eq!(dummy.params, real.params);
        assert_eq!(
            dummy.hash.map(|h| h.len()),
            real.hash.map(|h| h.len()),
            "same output length"
        );
        assert!(!verify_password(DUMMY_HASH, "correct horse battery"));
    }

    #[test]
    fn hashes_are_argon2id_with_owasp_parameters_and_a_fresh_salt() {
        let a = hash_password("correct horse battery").unwrap();
        let b = hash_password("correct horse battery").unwrap();
        assert!(a.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{a}");
        assert_ne!(a, b, "a new salt each time");
        assert!(!a.contains("correct horse battery"));
        assert!(verify_password(&a, "correct horse battery"));
        assert!(verify_password(&b, "correct horse battery"));
        assert!(!verify_password(&a, "correct horse batterY"));
        assert!(!verify_password("not a phc string", "x"));
    }

    #[test]
    fn names_and_passwords_are_checked_before_hashing() {
        for bad in ["", " alice", "alice ", "al\nice", &"x".repeat(65)] {
            assert!(
                matches!(
                    prepare(bad, "long enough password"),
                    Err(RegistryError::Invalid(_))
                ),
                "{bad:?}"
            );
        }
        assert!(prepare(&"é".repeat(64), "long enough password").is_ok());
        assert!(matches!(
            prepare("alice", "short"),
            Err(RegistryError::Invalid(m)) if !m.contains("short")
        ));
        assert!(matches!(
            prepare("alice", &"x".repeat(1025)),
            Err(RegistryError::Invalid(_))
        ));
        assert!(prepare("alice", &"x".repeat(1024)).is_ok());
        assert!(prepare("alice", "twelve chars").is_ok());
    }
}
