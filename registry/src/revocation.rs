//! What the revocation outbox says: a [`Revocation`] (something taken away
//! from a bot), the [`RevocationRecord`] a backend reads back, and the
//! [`StateChange`]s the node applies. A leaf: the rules that write the
//! outbox (`outbox`, `apps`, `ops`) and both backends name it here.

use crate::model::{Channel, Overwrite, Role};

/// Something taken away from a bot, as written to the outbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revocation {
    /// Uninstalled from a server (or the application deleted).
    Uninstalled { application_id: u64, server_id: u64 },
    /// The installation's granted permissions changed.
    PermissionsChanged { application_id: u64, server_id: u64 },
    /// The token was reset: its sessions must end (4004).
    TokenReset { application_id: u64 },
    /// Approved privileged intents changed (narrowed or widened).
    IntentsChanged { application_id: u64 },
}

impl Revocation {
    pub fn kind(&self) -> u8 {
        match self {
            Revocation::Uninstalled { .. } => 1,
            Revocation::PermissionsChanged { .. } => 2,
            Revocation::TokenReset { .. } => 3,
            Revocation::IntentsChanged { .. } => 4,
        }
    }

    pub fn application_id(&self) -> u64 {
        match *self {
            Revocation::Uninstalled { application_id, .. }
            | Revocation::PermissionsChanged { application_id, .. }
            | Revocation::TokenReset { application_id }
            | Revocation::IntentsChanged { application_id } => application_id,
        }
    }

    pub fn server_id(&self) -> u64 {
        match *self {
            Revocation::Uninstalled { server_id, .. }
            | Revocation::PermissionsChanged { server_id, .. } => server_id,
            _ => 0,
        }
    }

    pub fn from_parts(kind: u8, application_id: u64, server_id: u64) -> Option<Revocation> {
        Some(match kind {
            1 => Revocation::Uninstalled {
                application_id,
                server_id,
            },
            2 => Revocation::PermissionsChanged {
                application_id,
                server_id,
            },
            3 => Revocation::TokenReset { application_id },
            4 => Revocation::IntentsChanged { application_id },
            _ => return None,
        })
    }
}

/// An outbox row: its id, when the registry wrote it, and what it says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RevocationRecord {
    pub id: u64,
    pub at_ms: u64,
    pub revocation: Revocation,
}

/// A change to a server's snapshot, as the chat service reports it
/// (GUILD_UPDATE, CHANNEL_*, GUILD_ROLE_*). Ids are the chat service's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateChange {
    ServerName {
        server_id: u64,
        name: String,
    },
    /// Create or replace a channel and all its overwrites.
    UpsertChannel {
        channel: Channel,
        overwrites: Vec<Overwrite>,
    },
    DeleteChannel {
        channel_id: u64,
    },
    /// Create or update a role (`managed` is kept as stored).
    UpsertRole {
        role: Role,
    },
    DeleteRole {
        server_id: u64,
        role_id: u64,
    },
}

impl StateChange {
    pub fn server_id(&self) -> Option<u64> {
        match self {
            StateChange::ServerName { server_id, .. }
            | StateChange::DeleteRole { server_id, .. } => Some(*server_id),
            StateChange::UpsertChannel { channel, .. } => Some(channel.server_id),
            StateChange::UpsertRole { role } => Some(role.server_id),
            StateChange::DeleteChannel { .. } => None,
        }
    }
}
