//! `gatewayd registry developer ...` and `gatewayd registry intents ...`:
//! developer accounts (people who sign in to the portal and see the
//! applications they own) and the privileged-intent requests an operator
//! approves or denies (issue 29, docs/registry.md).
//!
//! A password is never a flag's value (it would be in `ps` and the shell's
//! history): it is read from a file or from standard input.

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use registry::{intents, Developer, Registry, RegistryError, MAX_PASSWORD_BYTES};

#[derive(Subcommand)]
pub(super) enum DeveloperCmd {
    /// Create a developer account (signs in to the portal); prints its id.
    Add {
        /// Account name: 1..=64 printable characters, no whitespace at either end.
        name: String,
        #[command(flatten)]
        password: PasswordSource,
    },
    /// Set a developer's password (the old one stops working at once).
    Passwd {
        /// The developer's account name.
        name: String,
        #[command(flatten)]
        password: PasswordSource,
    },
    /// Delete a developer account and its ownerships (the applications stay).
    Remove {
        /// The developer's account name.
        name: String,
    },
    /// List developers: name, id and the ids of the applications they own.
    List,
    /// Make a developer an owner of an application (idempotent).
    Own {
        /// The developer's account name.
        name: String,
        /// The application's id.
        app_id: u64,
    },
    /// Stop a developer owning an application.
    Disown {
        /// The developer's account name.
        name: String,
        /// The application's id.
        app_id: u64,
    },
}

/// Where the password comes from: one of the two, never a flag's value.
#[derive(Args)]
#[group(required = true, multiple = false)]
pub(super) struct PasswordSource {
    /// Read the password from this file (one trailing newline is dropped).
    /// At least 12 characters, at most 1024 bytes.
    #[arg(long, value_name = "PATH")]
    pub(super) password_file: Option<PathBuf>,
    /// Read the password from standard input (one trailing newline is dropped).
    #[arg(long)]
    pub(super) password_stdin: bool,
}

#[derive(Subcommand)]
pub(super) enum IntentsCmd {
    /// List pending privileged-intent requests (requested and not approved).
    Requests,
    /// Approve an application's pending request: approved becomes approved | requested.
    Approve {
        /// The application's id.
        app_id: u64,
    },
    /// Deny an application's pending request: requested becomes what is approved already.
    Deny {
        /// The application's id.
        app_id: u64,
    },
}

/// The privileged intents by name, in bit order.
const INTENT_NAMES: [(u64, &str); 3] = [
    (intents::GUILD_MEMBERS, "GUILD_MEMBERS"),
    (intents::GUILD_PRESENCES, "GUILD_PRESENCES"),
    (intents::MESSAGE_CONTENT, "MESSAGE_CONTENT"),
];

/// `GUILD_MEMBERS|MESSAGE_CONTENT`, or `none`.
fn in_words(bits: u64) -> String {
    let words: Vec<&str> = INTENT_NAMES
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|&(_, name)| name)
        .collect();
    if words.is_empty() {
        "none".to_owned()
    } else {
        words.join("|")
    }
}

/// Drops one trailing `\n` (or `\r\n`): what an editor or `echo` adds.
fn without_newline(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

/// Reads at most a little more than the longest password allowed, so a
/// wrong path (a large file, a device) fails fast and says so.
fn read_bounded(from: impl Read, what: &str) -> Result<String, String> {
    let limit = MAX_PASSWORD_BYTES + 2;
    let mut bytes = Vec::new();
    from.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the password from {what}: {e}"))?;
    if bytes.len() > limit {
        return Err(format!(
            "the password from {what} is longer than {MAX_PASSWORD_BYTES} bytes"
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("the password from {what} is not UTF-8 text"))?;
    Ok(without_newline(text))
}

impl PasswordSource {
    fn read(&self) -> Result<String, String> {
        match &self.password_file {
            Some(path) => read_file(path),
            None => read_bounded(std::io::stdin().lock(), "standard input"),
        }
    }
}

fn read_file(path: &Path) -> Result<String, String> {
    let what = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| format!("opening {what}: {e}"))?;
    read_bounded(file, &what)
}

fn err(e: RegistryError) -> String {
    e.to_string()
}

/// The developer of this name (names are unique).
fn by_name(reg: &dyn Registry, name: &str) -> Result<Developer, String> {
    reg.list_developers()
        .map_err(err)?
        .into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| format!("no developer named {name:?}"))
}

pub(super) fn run_developer(reg: &dyn Registry, cmd: DeveloperCmd) -> Result<(), String> {
    match cmd {
        DeveloperCmd::Add { name, password } => {
            let d = reg
                .create_developer(&name, &password.read()?)
                .map_err(err)?;
            println!("developer_id={} name={:?}", d.id, d.name);
        }
        DeveloperCmd::Passwd { name, password } => {
            if !reg
                .set_developer_password(&name, &password.read()?)
                .map_err(err)?
            {
                return Err(format!("no developer named {name:?}"));
            }
            println!("password set for {name:?}");
        }
        DeveloperCmd::Remove { name } => {
            if !reg.delete_developer(&name).map_err(err)? {
                return Err(format!("no developer named {name:?}"));
            }
            println!("deleted developer {name:?}");
        }
        DeveloperCmd::List => {
            for d in reg.list_developers().map_err(err)? {
                let apps: Vec<u64> = reg
                    .applications_of_developer(d.id)
                    .map_err(err)?
                    .iter()
                    .map(|a| a.id)
                    .collect();
                println!("developer {} name={:?} apps={apps:?}", d.id, d.name);
            }
        }
        DeveloperCmd::Own { name, app_id } => {
            let d = by_name(reg, &name)?;
            reg.own_application(d.id, app_id).map_err(err)?;
            println!("developer {name:?} owns application {app_id}");
        }
        DeveloperCmd::Disown { name, app_id } => {
            let d = by_name(reg, &name)?;
            let was = reg.disown_application(d.id, app_id).map_err(err)?;
            println!("disowned={was}");
        }
    }
    Ok(())
}

pub(super) fn run_intents(reg: &dyn Registry, cmd: IntentsCmd) -> Result<(), String> {
    let pending_of = |app_id: u64| {
        let a = reg
            .application(app_id)
            .map_err(err)?
            .ok_or_else(|| format!("no application {app_id}"))?;
        if a.requested_intents & !a.approved_intents == 0 {
            return Err(format!(
                "application {app_id} has no pending intent request (requested {}, approved {})",
                in_words(a.requested_intents),
                in_words(a.approved_intents)
            ));
        }
        Ok(a)
    };
    match cmd {
        IntentsCmd::Requests => {
            let list = reg.intent_requests().map_err(err)?;
            if list.is_empty() {
                println!("no pending intent requests");
            }
            for a in list {
                println!(
                    "application {} name={:?} requested={} approved={} pending={}",
                    a.id,
                    a.name,
                    in_words(a.requested_intents),
                    in_words(a.approved_intents),
                    in_words(a.requested_intents & !a.approved_intents)
                );
            }
        }
        IntentsCmd::Approve { app_id } => {
            let a = pending_of(app_id)?;
            let a = reg
                .set_approved_intents(app_id, a.approved_intents | a.requested_intents)
                .map_err(err)?;
            println!(
                "application {} approved={}",
                a.id,
                in_words(a.approved_intents)
            );
        }
        IntentsCmd::Deny { app_id } => {
            let a = pending_of(app_id)?;
            let a = reg
                .request_intents(app_id, a.requested_intents & a.approved_intents)
                .map_err(err)?;
            println!(
                "application {} request denied; approved={}",
                a.id,
                in_words(a.approved_intents)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_in_words() {
        assert_eq!(in_words(0), "none");
        assert_eq!(
            in_words(intents::MESSAGE_CONTENT | intents::GUILD_MEMBERS),
            "GUILD_MEMBERS|MESSAGE_CONTENT"
        );
        assert_eq!(in_words(intents::PRIVILEGED).matches('|').count(), 2);
    }

    #[test]
    fn one_trailing_newline_is_dropped_and_size_is_bounded() {
        let read = |b: &[u8]| read_bounded(b, "test");
        assert_eq!(read(b"secret pass\n").unwrap(), "secret pass");
        assert_eq!(read(b"secret pass\r\n").unwrap(), "secret pass");
        assert_eq!(read(b"secret pass \n\n").unwrap(), "secret pass \n");
        assert_eq!(read(b"no newline").unwrap(), "no newline");
        assert!(read(&[0xff, 0xfe]).unwrap_err().contains("UTF-8"));
        let long = vec![b'x'; MAX_PASSWORD_BYTES + 3];
        assert!(read(&long).unwrap_err().contains("longer"));
        let max = vec![b'x'; MAX_PASSWORD_BYTES];
        assert_eq!(read(&max).unwrap().len(), MAX_PASSWORD_BYTES);
    }
}
