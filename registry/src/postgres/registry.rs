//! [`PostgresRegistry`]: the connection settings (URL, TLS, client-side
//! bounds), the one connection behind a mutex, and how an operation runs
//! on it (`impl Backend`): under one deadline, on a fresh connection if
//! the last one broke, retried where nothing can have been written twice
//! (see the module docs of `crate::postgres`).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio_postgres::Config;

use super::conn::{Conn, Tx, WriteKind};
use super::driver::runtime;
use super::fault::Fault;
use super::listener::RevocationListener;
use super::schema;
use super::tls::{self, SslMode, TlsSettings};
use crate::backend::{Backend, Kind, Statements};
use crate::model::Server;
use crate::{error::RegistryError, error::Result, generic};

/// A bound for connection attempts where the caller has none of its own
/// (e.g. [`PostgresRegistry::listen_revocations`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The PostgreSQL registry. `Sync`: calls from several threads queue on the
/// one connection. Not for use from inside a tokio runtime (its calls block).
pub struct PostgresRegistry {
    config: Config,
    /// `sslmode` / `sslrootcert`, taken out of the URL.
    tls: TlsSettings,
    /// Each call's deadline, and the server's `statement_timeout`.
    statement_timeout: Duration,
    conn: Mutex<Link>,
}

/// The runtime that drives the connection, and the connection (None until
/// the first call, or after it broke).
struct Link {
    rt: Runtime,
    conn: Option<Conn>,
}

impl std::fmt::Debug for PostgresRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("PostgresRegistry")
            .field("hosts", &self.config.get_hosts())
            .field("ports", &self.config.get_ports())
            .field("dbname", &self.config.get_dbname())
            .field("user", &self.config.get_user())
            .field("tls", &self.tls)
            .field("statement_timeout", &self.statement_timeout)
            .finish()
    }
}

fn parse_url(url: &str) -> Result<(Config, TlsSettings)> {
    let (rest, tls) = tls::split_url(url)?;
    // The parser's message never repeats the URL (which may hold a password).
    let mut config = rest
        .parse::<Config>()
        .map_err(|e| RegistryError::Invalid(format!("database url: {e}")))?;
    config.ssl_mode(tls.mode.for_driver());
    Ok((config, tls))
}

/// The TLS settings of a configuration made without [`tls::split_url`]:
/// tokio-postgres's own modes, no certificate check.
fn tls_of(config: &Config) -> TlsSettings {
    use tokio_postgres::config::SslMode as Pg;
    let mode = match config.get_ssl_mode() {
        Pg::Disable => SslMode::Disable,
        Pg::Require => SslMode::Require,
        _ => SslMode::Prefer,
    };
    TlsSettings {
        mode,
        root_cert: None,
    }
}

/// Client-side bounds derived from the statement timeout, where the URL
/// does not set them.
fn tune(config: &mut Config, timeout: Duration) {
    let t = timeout.max(Duration::from_secs(1));
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(t);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(t + Duration::from_secs(1));
    }
    if config.get_keepalives() {
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            config.keepalives_idle(t);
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(Duration::from_secs(1));
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(3);
        }
    }
    if config.get_application_name().is_none() {
        config.application_name("gatewayd-registry");
    }
}

impl PostgresRegistry {
    /// Connects (e.g. `postgres://user@127.0.0.1:5432/gatewayd`) and brings
    /// the schema up to date. Every statement then runs under
    /// `statement_timeout` (server side); exceeding it, like an unreachable
    /// server, is [`RegistryError::Unavailable`]. A bad URL is
    /// [`RegistryError::Invalid`]. TLS as libpq's `sslmode` and
    /// `sslrootcert` in the URL say (see [`tls`]); a certificate that does
    /// not verify is [`RegistryError::Unavailable`] saying
    /// "certificate verify failed" and why.
    pub fn connect(url: &str, statement_timeout: Duration) -> Result<Self> {
        let (config, tls) = parse_url(url)?;
        Self::connect_tls(config, tls, statement_timeout)
    }

    /// Like [`connect`](Self::connect) with a parsed configuration (its
    /// `ssl_mode` as tokio-postgres has it: no certificate check).
    pub fn connect_config(config: Config, statement_timeout: Duration) -> Result<Self> {
        let tls = tls_of(&config);
        Self::connect_tls(config, tls, statement_timeout)
    }

    fn connect_tls(
        mut config: Config,
        tls: TlsSettings,
        statement_timeout: Duration,
    ) -> Result<Self> {
        if statement_timeout.is_zero() {
            return Err(RegistryError::Invalid(
                "statement timeout must be > 0".into(),
            ));
        }
        tune(&mut config, statement_timeout);
        let rt = runtime()?;
        let mut conn = Conn::open(
            &rt,
            &config,
            &tls,
            statement_timeout,
            Instant::now() + statement_timeout,
        )?;
        // DDL may take longer than an ordinary call (and may wait for
        // another node's migration): a few deadlines' worth.
        schema::migrate(&rt, Instant::now() + statement_timeout * 4, &mut conn)?;
        Ok(Self {
            config,
            tls,
            statement_timeout,
            conn: Mutex::new(Link {
                rt,
                conn: Some(conn),
            }),
        })
    }

    pub fn schema_version() -> u32 {
        schema::SCHEMA_VERSION
    }

    pub fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }

    /// A server with a chosen id (tests, load generators that need known
    /// shard placement). Like
    /// [`Registry::create_server`](crate::api::Registry::create_server)
    /// otherwise.
    pub fn create_server_with_id(&self, id: u64, name: &str, owner_id: u64) -> Result<Server> {
        generic::create_server_with_id(self, id, name, owner_id)
    }

    /// A listener on the revocation channel over its own connection, to the
    /// same database as this registry.
    pub fn revocation_listener(&self) -> Result<RevocationListener> {
        RevocationListener::open(
            self.config.clone(),
            self.tls.clone(),
            self.statement_timeout,
        )
    }

    /// A listener on [`REVOCATION_CHANNEL`](super::REVOCATION_CHANNEL) of
    /// the database at `url` (its own connection; each (re)connection,
    /// `LISTEN` included, bounded by `timeout`, e.g. [`DEFAULT_TIMEOUT`]).
    pub fn listen_revocations(url: &str, timeout: Duration) -> Result<RevocationListener> {
        let (mut config, tls) = parse_url(url)?;
        tune(&mut config, timeout);
        RevocationListener::open(config, tls, timeout.max(Duration::from_millis(1)))
    }

    fn lock(&self) -> MutexGuard<'_, Link> {
        // A panic mid-operation leaves `in_tx` set: that connection is
        // replaced below, so the poison carries no state.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The store the rules work on is [`Tx`]: it implements every store trait
/// (the files beside).
impl Statements for Tx<'_> {}

impl Backend for PostgresRegistry {
    type Tx<'a> = Tx<'a>;

    /// Runs one operation under one deadline (`statement_timeout` from now,
    /// connecting included), reconnecting first if the connection is known
    /// broken. Retried within the same deadline: a break noticed at BEGIN or
    /// in a single read (once, on a new connection; nothing was written),
    /// serialization failures and deadlocks (twice; the transaction was
    /// rolled back). A passed deadline is never retried.
    fn run<T>(&self, kind: Kind, mut f: impl FnMut(&mut Tx<'_>) -> Result<T>) -> Result<T> {
        let kind = WriteKind::from(kind);
        let deadline = Instant::now() + self.statement_timeout;
        let mut link = self.lock();
        let Link { rt, conn: slot } = &mut *link;
        let mut reconnected = false;
        let mut conflicts = 0;
        loop {
            if slot.as_ref().is_some_and(|c| !c.is_usable()) {
                *slot = None;
            }
            let conn = match slot.as_mut() {
                Some(c) => c,
                None => {
                    reconnected = true;
                    slot.insert(Conn::open(
                        rt,
                        &self.config,
                        &self.tls,
                        self.statement_timeout,
                        deadline,
                    )?)
                }
            };
            let fail = match conn.attempt(rt, deadline, kind, &mut f) {
                Ok(v) => return Ok(v),
                Err(fail) => fail,
            };
            let retry = match fail.fault {
                Some(Fault::Broken) => {
                    *slot = None;
                    !reconnected && (fail.at_begin || kind == WriteKind::Single)
                }
                Some(Fault::Deadline) => {
                    *slot = None;
                    false
                }
                Some(Fault::Retry) => {
                    conflicts += 1;
                    conflicts <= 2
                }
                Some(Fault::StaleStatement) => {
                    if let Some(c) = slot.as_mut() {
                        c.stmts.clear();
                    }
                    conflicts += 1;
                    conflicts <= 1
                }
                _ => false,
            };
            if !retry {
                return Err(fail.error);
            }
        }
    }
}
