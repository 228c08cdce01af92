//! Secrets from files: every secret setting can be given as the path of a
//! file that holds it, so that it never has to appear in the process list
//! (a flag) or in a config file readable by more than the node.
//!
//! | secret | value (flag / env / key) | from a file (flag / key) |
//! |---|---|---|
//! | admin token | `--admin-token`, `GATEWAYD_ADMIN_TOKEN`, `admin_token` | `--admin-token-file`, `admin_token_file` |
//! | registry URL (its password) | `--registry-url`, `GATEWAYD_REGISTRY_URL`, `registry_url` | `--registry-url-file`, `registry_url_file` |
//! | REST limits' Redis URL | `--rest-redis-url`, `GATEWAYD_REST_REDIS_URL`, `rest.redis_url` | `--rest-redis-url-file`, `rest.redis_url_file` |
//! | recovery's Redis URL | `--recovery-redis-url`, `GATEWAYD_RECOVERY_REDIS_URL`, `recovery.redis_url` | `--recovery-redis-url-file`, `recovery.redis_url_file` |
//!
//! TLS private keys are files already (`tls.key`, `cluster.tls_key`).
//!
//! A relative `*_file` path is looked up in `$CREDENTIALS_DIRECTORY` when
//! the service manager set it (systemd's `LoadCredential=name:/path` puts
//! the file there as `name`, readable by the service alone): the config
//! says `admin_token_file = "admin-token"` and the unit which file that is.
//! Without it, a relative path is relative to the working directory.
//!
//! Precedence, as for every setting: a flag (or its environment variable)
//! overrides the config file. A secret given twice at the same level (the
//! value and its file as flags, or both keys in the file) is an error, not
//! a silent choice. The file's content is the secret with its trailing line
//! end removed; an empty or unreadable file is an error that names the
//! setting and the path, never the content. A file that others may read
//! is used, with a warning: systemd credentials (`LoadCredential=`, read
//! as `%d/name`) are 0400 and owned by the service.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::flags::RunArgs;
use super::model::Config;

/// One secret setting: its name, the value flag (if given), the file flag
/// (if given), the config's file key, and the value to fill.
pub(super) struct Secret<'a> {
    pub name: &'static str,
    pub flag: bool,
    pub flag_file: Option<&'a Path>,
    pub key_file: Option<&'a Path>,
    pub value: &'a mut String,
}

impl Secret<'_> {
    /// Fill `value` from a file if one is named; after the flags were
    /// applied (`flag`: the value came from a flag or the environment).
    pub(super) fn resolve(self) -> Result<bool, String> {
        let file = match (self.flag, self.flag_file, self.key_file) {
            (true, Some(_), _) => {
                return Err(format!(
                    "{0}: given both as a value and as --{1}-file; give one",
                    self.name,
                    self.name.replace(['_', '.'], "-")
                ))
            }
            // A flag overrides the config file, its `_file` key included.
            (true, None, _) => return Ok(false),
            (false, Some(f), _) => f,
            (false, None, Some(f)) => {
                if !self.value.is_empty() {
                    return Err(format!(
                        "{0}: the config sets both {0} and {0}_file; keep one",
                        self.name
                    ));
                }
                f
            }
            (false, None, None) => return Ok(false),
        };
        *self.value = read(self.name, file)?;
        Ok(true)
    }
}

/// A `*_file` key of the config: empty is unset.
fn named(p: &Path) -> Option<&Path> {
    (!p.as_os_str().is_empty()).then_some(p)
}

/// Where a `*_file` path points: a relative one in the service manager's
/// credentials directory when there is one.
fn locate(path: &Path) -> PathBuf {
    match std::env::var_os("CREDENTIALS_DIRECTORY") {
        Some(dir) if path.is_relative() => Path::new(&dir).join(path),
        _ => path.to_path_buf(),
    }
}

/// A secret's file: its content without the trailing line end.
pub fn read(name: &str, path: &Path) -> Result<String, String> {
    let path = &locate(path);
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{name}_file {}: {e}", path.display()))?;
    let secret = text.trim_end_matches(['\n', '\r']);
    if secret.is_empty() {
        return Err(format!("{name}_file {}: the file is empty", path.display()));
    }
    if secret.contains('\n') {
        return Err(format!(
            "{name}_file {}: more than one line (the file must hold the secret alone)",
            path.display()
        ));
    }
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o004 != 0 {
            tracing::warn!(
                setting = name,
                path = %path.display(),
                "a secret's file is readable by every user: chmod o-r it (or use systemd credentials)"
            );
        }
    }
    Ok(secret.to_string())
}

/// Every secret named by a `*_file` flag or key, read (config/secrets.rs).
pub(super) fn from_files(cfg: &mut Config, args: &RunArgs) -> Result<(), String> {
    let f = &args.secrets;
    Secret {
        name: "admin_token",
        flag: args.admin_token.is_some(),
        flag_file: f.admin_token_file.as_deref(),
        key_file: named(cfg.admin_token_file.as_path()),
        value: &mut cfg.admin_token,
    }
    .resolve()?;
    Secret {
        name: "registry_url",
        flag: args.registry_url.is_some(),
        flag_file: f.registry_url_file.as_deref(),
        key_file: named(cfg.registry_url_file.as_path()),
        value: &mut cfg.registry_url,
    }
    .resolve()?;
    Secret {
        name: "rest.redis_url",
        flag: args.rest_redis_url.is_some(),
        flag_file: f.rest_redis_url_file.as_deref(),
        key_file: named(cfg.rest.redis_url_file.as_path()),
        value: &mut cfg.rest.redis_url,
    }
    .resolve()?;
    let recovery = Secret {
        name: "recovery.redis_url",
        flag: args.recovery_redis_url.is_some(),
        flag_file: f.recovery_redis_url_file.as_deref(),
        key_file: named(cfg.recovery.redis_url_file.as_path()),
        value: &mut cfg.recovery.redis_url,
    }
    .resolve()?;
    // As --recovery-redis-url does, its file flag turns recovery on.
    if recovery && f.recovery_redis_url_file.is_some() {
        cfg.recovery.enabled = true;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret<'a>(
        flag: bool,
        flag_file: Option<&'a Path>,
        key_file: Option<&'a Path>,
        value: &'a mut String,
    ) -> Secret<'a> {
        Secret {
            name: "admin_token",
            flag,
            flag_file,
            key_file,
            value,
        }
    }

    #[test]
    fn a_file_gives_the_secret_without_its_line_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "s3cret-token-0123456789\n").unwrap();
        let mut v = String::new();
        assert!(secret(false, Some(&p), None, &mut v).resolve().unwrap());
        assert_eq!(v, "s3cret-token-0123456789");
        // The config's key, with no flag.
        let mut v = String::new();
        assert!(secret(false, None, Some(&p), &mut v).resolve().unwrap());
        assert_eq!(v, "s3cret-token-0123456789");
    }

    #[test]
    fn a_secret_given_twice_at_one_level_is_an_error_and_a_flag_beats_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "from-the-file-0123456789").unwrap();
        let mut v = "from-a-flag-0123456789".to_string();
        let e = secret(true, Some(&p), None, &mut v).resolve().unwrap_err();
        assert!(e.contains("--admin-token-file"), "{e}");
        // A flag overrides the config file's `_file` key.
        assert!(!secret(true, None, Some(&p), &mut v).resolve().unwrap());
        assert_eq!(v, "from-a-flag-0123456789");
        // Both keys in the config file.
        let mut v = "in-the-config-0123456789".to_string();
        let e = secret(false, None, Some(&p), &mut v).resolve().unwrap_err();
        assert!(e.contains("admin_token_file"), "{e}");
    }

    #[test]
    fn an_empty_missing_or_multi_line_file_is_an_error_that_names_the_setting_not_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let e = read("admin_token", &empty).unwrap_err();
        assert!(e.contains("admin_token_file") && e.contains("empty"), "{e}");
        let e = read("registry_url", &dir.path().join("nope")).unwrap_err();
        assert!(e.contains("registry_url_file"), "{e}");
        let two = dir.path().join("two");
        std::fs::write(&two, "line-one-secret\nline-two\n").unwrap();
        let e = read("admin_token", &two).unwrap_err();
        assert!(
            e.contains("more than one line") && !e.contains("line-one-secret"),
            "{e}"
        );
    }
}
