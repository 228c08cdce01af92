//! The registry behaviour suite (`behaviour/`) against a real PostgreSQL
//! server, plus what only the shared database has: LISTEN/NOTIFY, several
//! nodes on one database, a server that goes away.
//!
//! Needs `GATEWAYD_TEST_DATABASE_URL` (a role that may CREATE DATABASE; `.ci/run`
//! starts a server and sets it; locally: `scripts/pg-test-server.sh start`).
//! Every test creates its own database (`gatewayd_t_<pid>_<n>_<random>`) and
//! drops it at the end, so test threads run in parallel without meeting.
//! Unset: each test is skipped with a message, except under `CI`, where it
//! fails.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ::postgres::{Client, NoTls};
use registry::permissions::*;
use registry::postgres::Config;
use registry::*;

#[macro_use]
mod behaviour;

const ENV: &str = "GATEWAYD_TEST_DATABASE_URL";
const TIMEOUT: Duration = Duration::from_secs(5);

/// The test server's admin URL. The tests that need it are `#[ignore]`d
/// (plain `cargo test` lists them as ignored, with the reason); run with
/// `--include-ignored` (scripts/test-all.sh does) they fail without it.
fn admin_url() -> String {
    match std::env::var(ENV) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "{ENV} is not set: this test needs a PostgreSQL server. scripts/test-all.sh \
             starts one; by hand: eval \"$(scripts/pg-test-server.sh start)\""
        ),
    }
}

/// `url` with its database replaced by `db` (URL or key=value form).
fn with_dbname(url: &str, db: &str) -> String {
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let (rest, query) = match rest.find('?') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let authority = rest.split('/').next().unwrap_or("");
            return format!("{scheme}{authority}/{db}{query}");
        }
    }
    format!("{url} dbname={db}")
}

fn admin_client(url: &str) -> Client {
    Client::connect(url, NoTls)
        .unwrap_or_else(|e| panic!("cannot connect to {ENV}: {e} (is the server running?)"))
}

/// A fresh database, dropped (with any connections left) at the end.
struct TestDb {
    admin: String,
    name: String,
    url: String,
}

impl TestDb {
    fn create() -> TestDb {
        static N: AtomicU32 = AtomicU32::new(0);
        let admin = admin_url();
        let name = format!(
            "gatewayd_t_{}_{}_{:08x}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            getrandom::u32().unwrap()
        );
        admin_client(&admin)
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        let url = with_dbname(&admin, &name);
        TestDb { admin, name, url }
    }

    fn open(&self) -> PostgresRegistry {
        PostgresRegistry::connect(&self.url, TIMEOUT).unwrap()
    }

    /// A plain client on this database (to look at or lock what the
    /// registry wrote).
    fn raw(&self) -> Client {
        admin_client(&self.url)
    }

    fn config(&self) -> Config {
        self.url.parse().unwrap()
    }

    /// The server's TCP address, for a proxy in front of it (None, said on
    /// stderr, if the test server is not on TCP).
    fn tcp_target(&self) -> Option<SocketAddr> {
        let cfg = self.config();
        match (&cfg.get_hosts()[0], cfg.get_ports().first()) {
            (registry::postgres::Host::Tcp(h), port) => {
                let host = if h == "localhost" { "127.0.0.1" } else { h };
                Some(
                    format!("{host}:{}", port.copied().unwrap_or(5432))
                        .parse()
                        .unwrap(),
                )
            }
            #[allow(unreachable_patterns)]
            _ => {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: proxy part (the test server is not on TCP)"
                );
                None
            }
        }
    }

    /// This database, reached through a proxy on `port`.
    fn config_via(&self, port: u16) -> Config {
        let cfg = self.config();
        let mut via = Config::new();
        via.host("127.0.0.1").port(port).dbname(&self.name);
        if let Some(user) = cfg.get_user() {
            via.user(user);
        }
        if let Some(pw) = cfg.get_password() {
            via.password(pw);
        }
        via
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.admin, NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

impl behaviour::Store for TestDb {
    fn open(&self) -> Box<dyn behaviour::Backend> {
        Box::new(TestDb::open(self))
    }

    fn stored_bytes(&self) -> Vec<u8> {
        let mut raw = self.raw();
        let mut out = Vec::new();
        let tables = raw
            .query(
                "SELECT tablename::TEXT FROM pg_tables WHERE schemaname = 'public'",
                &[],
            )
            .unwrap();
        for t in tables.iter().map(|r| r.get::<_, String>(0)) {
            for r in raw
                .query(&format!("SELECT x::TEXT FROM {t} x"), &[])
                .unwrap()
            {
                out.extend_from_slice(r.get::<_, &str>(0).as_bytes());
                out.push(b'\n');
            }
        }
        let bytea = raw
            .query(
                "SELECT table_name::TEXT, column_name::TEXT FROM information_schema.columns
                 WHERE table_schema = 'public' AND data_type = 'bytea'",
                &[],
            )
            .unwrap();
        for r in &bytea {
            let (t, c): (String, String) = (r.get(0), r.get(1));
            for v in raw
                .query(&format!("SELECT {c} FROM {t} WHERE {c} IS NOT NULL"), &[])
                .unwrap()
            {
                out.extend(v.get::<_, Vec<u8>>(0));
                out.push(0);
            }
        }
        out
    }
}

/// A registry on its own fresh database.
struct Fresh {
    reg: PostgresRegistry,
    _db: TestDb, // dropped after `reg` (fields drop in order)
}

impl std::ops::Deref for Fresh {
    type Target = PostgresRegistry;
    fn deref(&self) -> &PostgresRegistry {
        &self.reg
    }
}

fn fresh() -> Fresh {
    let db = TestDb::create();
    Fresh {
        reg: db.open(),
        _db: db,
    }
}

behaviour_tests!(
    fresh: fresh(),
    store: TestDb::create(),
    #[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"],
);

// ------------------------------------------------------------ PG only

/// Compile-time only: no server needed.
#[test]
fn registry_and_listener_can_move_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}
    assert_send_sync::<PostgresRegistry>();
    assert_send::<RevocationListener>();
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn registry_is_object_safe_and_shareable() {
    let db = TestDb::create();
    let reg: Box<dyn Registry> = Box::new(db.open());
    assert!(reg.list_applications().unwrap().is_empty());
    // The Debug form names the database, never a password.
    let reg = PostgresRegistry::connect(&db.url, TIMEOUT).unwrap();
    assert!(format!("{reg:?}").contains(&db.name));
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn notify_arrives_for_a_revocation_written_by_another_connection() {
    let db = TestDb::create();
    let writer = db.open();
    let seed = writer.seed_demo().unwrap().unwrap();
    let (app, sid) = (seed.app.id, seed.server_id);
    let mut listener = PostgresRegistry::listen_revocations(&db.url, TIMEOUT).unwrap();

    // Nothing pushed: None after the timeout, not before.
    let t = Instant::now();
    assert_eq!(listener.wait(Duration::from_millis(200)).unwrap(), None);
    assert!(t.elapsed() >= Duration::from_millis(200));

    // A revocation committed by another connection arrives within 1 s,
    // carrying its outbox id.
    let t = Instant::now();
    writer.install(app, sid, VIEW_CHANNEL).unwrap(); // narrower grant
    let id = listener
        .wait(Duration::from_secs(1))
        .unwrap()
        .expect("NOTIFY within 1 s");
    let latency = t.elapsed();
    eprintln!("write + commit + NOTIFY delivery: {latency:?}");
    assert!(latency < Duration::from_secs(1), "{latency:?}");
    assert_eq!(id, writer.last_revocation_id().unwrap());
    assert_eq!(
        writer.revocations_since(id - 1, 10).unwrap()[0].revocation,
        Revocation::PermissionsChanged {
            application_id: app,
            server_id: sid
        }
    );

    // A waiting listener on another thread is woken by the commit.
    let waiter = std::thread::spawn(move || {
        let t = Instant::now();
        let got = listener.wait(Duration::from_secs(5)).unwrap();
        (got, t.elapsed(), listener)
    });
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    writer.reset_token(app).unwrap();
    let (got, _, mut listener) = waiter.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(got, Some(writer.last_revocation_id().unwrap()));

    // Several in a row arrive in commit order; no-ops push nothing.
    writer.install(app, sid, VIEW_CHANNEL).unwrap(); // unchanged grant
    writer.set_approved_intents(app, 0).unwrap();
    assert!(writer.uninstall(app, sid).unwrap());
    assert!(!writer.uninstall(app, sid).unwrap());
    let a = listener.wait(Duration::from_secs(1)).unwrap().unwrap();
    let b = listener.wait(Duration::from_secs(1)).unwrap().unwrap();
    assert!(a < b);
    assert_eq!(b, writer.last_revocation_id().unwrap());
    assert_eq!(listener.wait(Duration::from_millis(200)).unwrap(), None);
    let kinds: Vec<u8> = writer
        .revocations_since(a - 1, 10)
        .unwrap()
        .iter()
        .map(|r| r.revocation.kind())
        .collect();
    assert_eq!(kinds, [4, 1]);

    // A rolled-back write pushes nothing (NOTIFY is transactional).
    let mut raw = db.raw();
    raw.batch_execute(
        "BEGIN; SELECT pg_notify('gatewayd_revocations', '999999'); ROLLBACK;
         NOTIFY gatewayd_revocations, 'not-an-id'",
    )
    .unwrap();
    assert_eq!(listener.wait(Duration::from_millis(300)).unwrap(), None);

    // The registry's own listener (same database, its own connection).
    let mut own = writer.revocation_listener().unwrap();
    writer.delete_application(app).unwrap(); // nothing installed: no revocation
    writer
        .reset_token(writer.create_application("x", 0, 1).unwrap().0.id)
        .unwrap();
    assert_eq!(
        own.wait(Duration::from_secs(1)).unwrap(),
        Some(writer.last_revocation_id().unwrap())
    );
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn two_nodes_share_one_database() {
    let db = TestDb::create();
    // Both nodes start at once on an empty database: one migrates, both
    // seed, exactly one creates the demo (and gets its token).
    let (a, b) = std::thread::scope(|s| {
        let ha = s.spawn(|| db.open());
        let hb = s.spawn(|| db.open());
        (ha.join().unwrap(), hb.join().unwrap())
    });
    let (sa, sb) = std::thread::scope(|s| {
        let ha = s.spawn(|| a.seed_demo().unwrap().unwrap());
        let hb = s.spawn(|| b.seed_demo().unwrap().unwrap());
        (ha.join().unwrap(), hb.join().unwrap())
    });
    assert_eq!(
        (sa.app.id, sa.server_id, sa.general_channel_id),
        (sb.app.id, sb.server_id, sb.general_channel_id)
    );
    assert_eq!(
        usize::from(sa.token.is_some()) + usize::from(sb.token.is_some()),
        1
    );
    assert_eq!(a.list_applications().unwrap().len(), 1);

    // Each sees the other's writes and revision changes.
    let rev = b.revision().unwrap();
    let (app, token) = a.create_application("from-a", 0, 1).unwrap();
    assert!(b.revision().unwrap() > rev);
    assert_eq!(a.revision().unwrap(), b.revision().unwrap());
    assert_eq!(b.authenticate(&token).unwrap().unwrap().id, app.id);
    let s = b.create_server("S", 1).unwrap();
    a.install(app.id, s.id, VIEW_CHANNEL).unwrap();
    assert!(b.installation(app.id, s.id).unwrap().is_some());
    assert_eq!(b.installed(&[(app.id, s.id)]).unwrap(), vec![true]);
    let rev = a.revision().unwrap();
    assert!(b.uninstall(app.id, s.id).unwrap());
    assert!(a.revision().unwrap() > rev);
    assert_eq!(a.installed(&[(app.id, s.id)]).unwrap(), vec![false]);
    let reads = a.revision().unwrap();
    a.list_servers().unwrap();
    b.server_snapshot(s.id).unwrap();
    assert_eq!(a.revision().unwrap(), reads, "reads change nothing");

    // Identifies from four nodes at once are each counted exactly once.
    let nodes = [&a, &b, &db.open(), &db.open()];
    let now = 1_700_000_000_000;
    std::thread::scope(|sc| {
        for n in nodes {
            sc.spawn(move || {
                for _ in 0..25 {
                    n.record_session_start(app.id, now).unwrap();
                }
            });
        }
    });
    assert_eq!(
        a.session_start_remaining(app.id, now).unwrap().remaining,
        1000 - 100
    );

    // Revocations written by both nodes at once: unique ids, increasing in
    // commit order, none lost; both nodes agree on the newest.
    let start = a.last_revocation_id().unwrap();
    let servers: Vec<u64> = (0..20)
        .map(|i| {
            let s = a.create_server(&format!("s{i}"), 1).unwrap();
            a.install(app.id, s.id, VIEW_CHANNEL).unwrap();
            s.id
        })
        .collect();
    std::thread::scope(|sc| {
        for (k, n) in [&a, &b].into_iter().enumerate() {
            let servers = &servers;
            sc.spawn(move || {
                for sid in servers.iter().skip(k).step_by(2) {
                    assert!(n.uninstall(app.id, *sid).unwrap());
                }
            });
        }
    });
    let recs = b.revocations_since(start, 100).unwrap();
    assert_eq!(recs.len(), 20);
    assert!(recs.windows(2).all(|w| w[0].id < w[1].id));
    let mut got: Vec<u64> = recs.iter().map(|r| r.revocation.server_id()).collect();
    got.sort();
    let mut want = servers.clone();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        a.last_revocation_id().unwrap(),
        b.last_revocation_id().unwrap()
    );
    assert_eq!(a.last_revocation_id().unwrap(), recs[19].id);
}

/// A token is kept as a 16-byte salt and a 32-byte hash (that the token
/// itself is nowhere: `behaviour::secrets_are_never_stored`).
#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn token_is_stored_as_salt_and_hash() {
    let db = TestDb::create();
    let reg = db.open();
    let (app, _) = reg.create_application("secret-bot", 0, 1).unwrap();
    let r = db
        .raw()
        .query_one(
            "SELECT token_salt, token_hash FROM applications WHERE id = $1",
            &[&(app.id as i64)],
        )
        .unwrap();
    let (salt, hash): (Vec<u8>, Vec<u8>) = (r.get(0), r.get(1));
    assert_eq!((salt.len(), hash.len()), (16, 32));
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn schema_version_and_too_new() {
    let db = TestDb::create();
    let reg = db.open();
    let mut raw = db.raw();
    let v: i64 = raw
        .query_one("SELECT value FROM meta WHERE key = 'schema_version'", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, i64::from(PostgresRegistry::schema_version()));
    assert_eq!(
        PostgresRegistry::schema_version(),
        SqliteRegistry::schema_version(),
        "one version number, one schema, on both engines"
    );
    // Reopening is a no-op.
    let rev = reg.revision().unwrap();
    drop(reg);
    let reg = db.open();
    assert_eq!(reg.revision().unwrap(), rev);
    drop(reg);
    // A database from a newer build is refused, not downgraded.
    raw.execute(
        "UPDATE meta SET value = 99 WHERE key = 'schema_version'",
        &[],
    )
    .unwrap();
    assert!(matches!(
        PostgresRegistry::connect(&db.url, TIMEOUT),
        Err(RegistryError::SchemaTooNew { found: 99, .. })
    ));
    assert!(matches!(
        PostgresRegistry::connect("postgres://[bad", TIMEOUT),
        Err(RegistryError::Invalid(_))
    ));
    assert!(matches!(
        PostgresRegistry::connect(&db.url, Duration::ZERO),
        Err(RegistryError::Invalid(_))
    ));
}

/// Within the timeout plus scheduling slack, never a hang.
fn assert_bounded(t: Instant, timeout: Duration) {
    let e = t.elapsed();
    assert!(e < timeout + Duration::from_secs(3), "took {e:?}");
}

fn assert_unavailable<T: std::fmt::Debug>(r: Result<T>) {
    assert!(
        matches!(r, Err(RegistryError::Unavailable(_))),
        "expected Unavailable, got {r:?}"
    );
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn statement_timeout_and_held_locks_are_unavailable() {
    let db = TestDb::create();
    let timeout = Duration::from_millis(500);
    let reg = PostgresRegistry::connect(&db.url, timeout).unwrap();
    let (app, _) = reg.create_application("bot", 0, 1).unwrap();

    // Another node holds the write lock (stuck mid-transaction): writes
    // time out as Unavailable, reads go on.
    let mut other = db.raw();
    other
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&registry::postgres::WRITE_LOCK],
        )
        .unwrap();
    let t = Instant::now();
    assert_unavailable(reg.create_server("S", 1));
    assert!(t.elapsed() >= timeout);
    assert_bounded(t, timeout);
    assert!(reg.list_servers().unwrap().is_empty());
    assert!(reg.application(app.id).unwrap().is_some());
    // Identify counting does not take the write lock.
    reg.record_session_start(app.id, 1_700_000_000_000).unwrap();
    other
        .execute(
            "SELECT pg_advisory_unlock($1)",
            &[&registry::postgres::WRITE_LOCK],
        )
        .unwrap();
    reg.create_server("S", 1).unwrap();

    // A table lock (a long migration, a manual LOCK): the same.
    other
        .batch_execute("BEGIN; LOCK TABLE servers IN EXCLUSIVE MODE")
        .unwrap();
    let t = Instant::now();
    assert_unavailable(reg.create_server("T", 1));
    assert_bounded(t, timeout);
    assert_eq!(reg.list_servers().unwrap().len(), 1);
    other.batch_execute("ROLLBACK").unwrap();

    // A slow statement is cancelled by the server's statement_timeout.
    other
        .batch_execute("BEGIN; LOCK TABLE applications IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let t = Instant::now();
    assert_unavailable(reg.application(app.id));
    assert_bounded(t, timeout);
    other.batch_execute("ROLLBACK").unwrap();
    assert!(reg.application(app.id).unwrap().is_some());
    reg.create_server("U", 1).unwrap();
    assert_eq!(reg.list_servers().unwrap().len(), 2);
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn terminated_backend_is_replaced_transparently() {
    let db = TestDb::create();
    let reg = db.open();
    let mut listener = reg.revocation_listener().unwrap();
    let mut raw = db.raw();
    let kill = |raw: &mut Client| {
        raw.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND backend_type = 'client backend'",
            &[],
        )
        .unwrap()
        .len()
    };
    assert_eq!(kill(&mut raw), 2);
    // A read, then a write: each finds its connection dead before sending
    // anything and retries on a new one.
    assert!(reg.list_servers().unwrap().is_empty());
    assert_eq!(kill(&mut raw), 1);
    let s = reg.create_server("S", 1).unwrap();
    assert_eq!(reg.list_servers().unwrap(), vec![s]);

    // The listener reports the break once, then listens again.
    assert_unavailable(listener.wait(Duration::from_secs(2)));
    assert_eq!(listener.wait(Duration::from_millis(100)).unwrap(), None);
    let (app, _) = reg.create_application("bot", 0, 1).unwrap();
    reg.reset_token(app.id).unwrap();
    assert_eq!(
        listener.wait(Duration::from_secs(1)).unwrap(),
        Some(reg.last_revocation_id().unwrap())
    );
}

/// A loopback TCP proxy in front of the server, which the test can stop
/// (every connection cut, nothing listening) and start again: a database
/// server that goes away and comes back, without touching the real one.
struct Proxy {
    port: u16,
    stop: Arc<AtomicBool>,
    /// While set, nothing is forwarded and nothing new accepted (the kernel
    /// still completes handshakes into the listen queue): a server that was
    /// SIGSTOPped, as its clients see it.
    frozen: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    fn start(port: u16, target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let frozen = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (st, fz, cs) = (stop.clone(), frozen.clone(), conns.clone());
        let accept = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                if fz.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let (down, _) = match listener.accept() {
                    Ok(c) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    Err(e) => panic!("proxy accept: {e}"),
                };
                down.set_nonblocking(false).unwrap();
                let Ok(up) = TcpStream::connect(target) else {
                    continue;
                };
                let mut list = cs.lock().unwrap();
                list.push(down.try_clone().unwrap());
                list.push(up.try_clone().unwrap());
                for (mut from, mut to) in [
                    (down.try_clone().unwrap(), up.try_clone().unwrap()),
                    (up, down),
                ] {
                    let fz = fz.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            while fz.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
            }
            // The listener closes here: connections are refused.
        });
        Proxy {
            port,
            stop,
            frozen,
            conns,
            accept: Some(accept),
        }
    }

    fn freeze(&self, on: bool) {
        self.frozen.store(on, Ordering::SeqCst);
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            h.join().unwrap();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn stopped_or_unreachable_server_is_unavailable() {
    let db = TestDb::create();
    let timeout = Duration::from_secs(2);

    // Nothing listening: refused at once.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://nobody@127.0.0.1:{port}/none");
    let t = Instant::now();
    assert_unavailable(PostgresRegistry::connect(&url, timeout));
    assert_unavailable(PostgresRegistry::listen_revocations(&url, timeout));
    assert_bounded(t, timeout);

    // Through a proxy that stops (the server "goes away") and comes back.
    let Some(target) = db.tcp_target() else {
        return;
    };
    let mut proxy = Proxy::start(0, target);
    let reg = PostgresRegistry::connect_config(db.config_via(proxy.port), timeout).unwrap();
    let mut listener = reg.revocation_listener().unwrap();
    let (app, _) = reg.create_application("bot", 0, 1).unwrap();

    proxy.stop();
    for _ in 0..3 {
        let t = Instant::now();
        assert_unavailable(reg.list_servers());
        assert_unavailable(reg.create_server("S", 1));
        assert_unavailable(reg.authenticate(&format!(
            "{}.AAAAAAAA.{}",
            base64_id(app.id),
            "A".repeat(36)
        )));
        assert_unavailable(reg.record_session_start(app.id, 1));
        assert_unavailable(reg.installed(&[(app.id, 1)]));
        assert_unavailable(listener.wait(Duration::from_secs(1)));
        assert_bounded(t, timeout);
    }

    // Back: the next calls reconnect by themselves.
    let _proxy = Proxy::start(proxy.port, target);
    assert!(reg.list_servers().unwrap().is_empty());
    reg.create_server("S", 1).unwrap();
    assert_eq!(listener.wait(Duration::from_millis(100)).unwrap(), None);
    reg.reset_token(app.id).unwrap();
    assert_eq!(
        listener.wait(Duration::from_secs(1)).unwrap(),
        Some(reg.last_revocation_id().unwrap())
    );
}

/// The first segment of a token for `id` (URL-safe base64 of its decimal).
fn base64_id(id: u64) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.to_string())
}

/// A server that stops answering but keeps its connections (what SIGSTOP
/// does): every call, on its open connection or on a new one, is
/// `Unavailable` at its deadline, never a hang; the listener's waits end on
/// time; and when the server answers again, the next calls just work.
#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn frozen_server_is_unavailable_at_the_deadline() {
    let db = TestDb::create();
    let Some(target) = db.tcp_target() else {
        return;
    };
    let timeout = Duration::from_millis(1000);
    let proxy = Proxy::start(0, target);
    let reg = PostgresRegistry::connect_config(db.config_via(proxy.port), timeout).unwrap();
    let mut listener = reg.revocation_listener().unwrap();
    let (app, _) = reg.create_application("bot", 0, 1).unwrap();
    let server = reg.create_server("S", 1).unwrap();

    proxy.freeze(true);
    // The first call waits on its open connection; each later one on a new
    // connection whose startup is never answered.
    for _ in 0..2 {
        let t = Instant::now();
        assert_unavailable(reg.list_servers());
        assert!(t.elapsed() >= timeout, "gave up early: {:?}", t.elapsed());
        assert_bounded(t, timeout);
        let t = Instant::now();
        assert_unavailable(reg.create_server("T", 1));
        assert_bounded(t, timeout);
        let t = Instant::now();
        assert_unavailable(reg.installed(&[(app.id, server.id)]));
        assert_bounded(t, timeout);
    }
    let t = Instant::now();
    assert_eq!(listener.wait(Duration::from_millis(300)).unwrap(), None);
    assert_bounded(t, Duration::from_millis(300));

    proxy.freeze(false);
    // Nothing of the abandoned write reached the server.
    assert_eq!(reg.list_servers().unwrap(), vec![server.clone()]);
    assert_eq!(reg.installed(&[(app.id, server.id)]).unwrap(), vec![false]);
    reg.reset_token(app.id).unwrap();
    assert_eq!(
        listener.wait(Duration::from_secs(2)).unwrap(),
        Some(reg.last_revocation_id().unwrap())
    );
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn developer_password_stored_as_argon2id_only() {
    let db = TestDb::create();
    let reg = db.open();
    let pw = "a password of developers";
    let dev = reg.create_developer("alice", pw).unwrap();
    let mut raw = db.raw();
    let hash: String = raw
        .query_one(
            "SELECT password_hash FROM developers WHERE id = $1",
            &[&(dev.id as i64)],
        )
        .unwrap()
        .get(0);
    assert!(
        hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
        "{hash}"
    );
    assert!(!hash.contains(pw));
}

/// A database of schema 10 (before developers) gains the tables and the
/// `requested_intents` column, its applications unchanged.
#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn schema_10_database_is_migrated_to_developers() {
    let db = TestDb::create();
    let reg = db.open();
    let (app, token) = reg
        .create_application("old-bot", intents::MESSAGE_CONTENT, 1)
        .unwrap();
    drop(reg);
    let mut raw = db.raw();
    raw.batch_execute(
        "DROP TABLE developer_apps; DROP TABLE developers;
         ALTER TABLE applications DROP COLUMN requested_intents;
         UPDATE meta SET value = 10 WHERE key = 'schema_version'",
    )
    .unwrap();
    let reg = db.open();
    let v: i64 = raw
        .query_one("SELECT value FROM meta WHERE key = 'schema_version'", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, i64::from(PostgresRegistry::schema_version()));
    let got = reg.authenticate(&token).unwrap().unwrap();
    assert_eq!(got, app);
    assert_eq!(got.requested_intents, 0);
    let dev = reg.create_developer("alice", "a long password").unwrap();
    reg.own_application(dev.id, app.id).unwrap();
    assert_eq!(reg.applications_of_developer(dev.id).unwrap(), vec![app]);
}
