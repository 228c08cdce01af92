//! What a registry call can fail with ([`RegistryError`]) and the crate's
//! [`Result`]. A leaf: every file of the crate names it here, and it names
//! nothing of the crate.

pub type Result<T, E = RegistryError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The store is busy or locked beyond the busy timeout: transient, treat
    /// as a brownout (keep leases, refuse new identifies), not as "no".
    #[error("registry unavailable: {0}")]
    Unavailable(String),
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: u64 },
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("database schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew { found: u32, supported: u32 },
    /// A limit of the platform's was reached (e.g. 100 commands of one
    /// kind, 200 command creates a day): nothing was written.
    #[error("maximum number of {what} reached ({max})")]
    LimitReached { what: &'static str, max: u32 },
    /// A name that must be unique is in use (e.g. a developer's).
    #[error("{what} {name:?} is already taken")]
    Taken { what: &'static str, name: String },
    #[error("random source failed: {0}")]
    Random(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// Any other backend failure (kept opaque so the trait is backend-neutral).
    #[error("registry storage: {0}")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<rusqlite::Error> for RegistryError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
        match e.sqlite_error_code() {
            Some(DatabaseBusy | DatabaseLocked) => RegistryError::Unavailable(e.to_string()),
            _ => RegistryError::Storage(Box::new(e)),
        }
    }
}
