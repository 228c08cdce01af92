//! `gatewayd run --check`: validate the configuration and reach every
//! service it names, each within its own deadline, without starting the
//! node: nothing is bound and no file is created. A registry that exists
//! is opened as the node opens it (its schema brought up to date, as a
//! start would).
//!
//! One line per check on stdout: `ok`, `FAIL` or `skip` (not configured),
//! the check's name, and what was found (secrets in URLs shown as `***`).
//! Exit status 0 when no check failed, 1 otherwise. What a check does:
//!
//! | check | how | deadline |
//! |---|---|---|
//! | config | parse, validate, read the `*_file` secrets | - |
//! | data_dir | exists and writable, or its parent is | - |
//! | tls | load the gateway certificate chain and key | - |
//! | cluster.tls | load the link's certificate, key and CA (mutual TLS) | - |
//! | registry | SQLite: open the file read-only if it exists and read its revision; PostgreSQL: connect and read the revision | `registry.timeout_ms` |
//! | rest.redis | connect, AUTH/SELECT, PING | `rest.redis_timeout_ms` |
//! | recovery.redis | the same | `recovery.timeout_ms` |
//! | kafka | the topic's metadata from the brokers | `registry.timeout_ms` |
//! | chat.upstream | TCP connect | `chat.upstream_timeout_ms` |
//! | egress.remote | connect | `egress.connect_timeout_ms` |

use std::time::{Duration, Instant};

use crate::config::{Config, RunArgs};

/// The report: one line per check, and whether any failed.
#[derive(Default)]
struct Report {
    failed: usize,
}

impl Report {
    fn line(&mut self, outcome: Result<Option<String>, String>, name: &str) {
        match outcome {
            Ok(Some(what)) => println!("ok    {name:<15} {what}"),
            Ok(None) => println!("skip  {name:<15} not configured"),
            Err(why) => {
                self.failed += 1;
                println!("FAIL  {name:<15} {why}");
            }
        }
    }
}

/// Run every check; the process's exit status.
pub fn run(args: &RunArgs) -> i32 {
    let mut r = Report::default();
    let cfg = match Config::load(args) {
        Ok(cfg) => {
            r.line(Ok(Some(describe(&cfg))), "config");
            cfg
        }
        Err(e) => {
            r.line(Err(e), "config");
            println!("check: 1 failed (the configuration; nothing else was tried)");
            return 1;
        }
    };
    r.line(data_dir(&cfg), "data_dir");
    r.line(tls(&cfg), "tls");
    r.line(cluster_tls(&cfg), "cluster.tls");
    r.line(registry(&cfg), "registry");
    let rest = &cfg.rest;
    r.line(redis(&rest.redis_url, rest.redis_timeout_ms), "rest.redis");
    let rec = &cfg.recovery;
    r.line(
        redis(&rec.redis_url, rec.timeout_ms).map(|o| o.filter(|_| rec.enabled)),
        "recovery.redis",
    );
    r.line(kafka(&cfg), "kafka");
    r.line(upstream(&cfg), "chat.upstream");
    r.line(egress(&cfg), "egress.remote");
    if r.failed == 0 {
        println!("check: every check passed");
        0
    } else {
        println!("check: {} failed", r.failed);
        1
    }
}

fn describe(cfg: &Config) -> String {
    format!(
        "gateway {} admin {} ingest {} workers {}",
        cfg.gateway_addr,
        cfg.admin_addr,
        cfg.events.ingest_addr,
        cfg.worker_count()
    )
}

/// A URL with its password (`user:password@`) shown as `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // The authority ends at the first '/' after the '@' (if any).
    match rest.rsplit_once('@') {
        Some((auth, host)) => {
            let user = auth.split_once(':').map_or(auth, |(u, _)| u);
            let shown = if auth.contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            format!("{scheme}://{shown}@{host}")
        }
        None => url.to_string(),
    }
}

fn ms(t: Instant) -> String {
    format!("{:.1} ms", t.elapsed().as_secs_f64() * 1e3)
}

fn data_dir(cfg: &Config) -> Result<Option<String>, String> {
    let dir = &cfg.data_dir;
    let target = if dir.exists() {
        dir.clone()
    } else {
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        if !parent.exists() {
            return Err(format!(
                "{}: neither it nor its parent exists",
                dir.display()
            ));
        }
        parent.to_path_buf()
    };
    let c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a NUL in the path", dir.display()))?;
    // SAFETY: access(2) on a NUL-terminated path we own.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(format!(
            "{}: not writable by this user ({})",
            target.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(Some(if dir.exists() {
        format!("{} writable", dir.display())
    } else {
        format!("{} will be created", dir.display())
    }))
}

fn tls(cfg: &Config) -> Result<Option<String>, String> {
    match super::services::load_tls(cfg)? {
        Some(_) => Ok(Some(format!(
            "certificate {} and key loaded",
            cfg.tls
                .cert
                .as_ref()
                .map_or(String::new(), |c| c.display().to_string())
        ))),
        None => Ok(None),
    }
}

fn cluster_tls(cfg: &Config) -> Result<Option<String>, String> {
    let c = &cfg.cluster;
    if c.tls_cert.is_empty() {
        return Ok(None);
    }
    crate::link::cluster::tls::LinkTls::load(crate::link::cluster::tls::Paths {
        cert: c.tls_cert.clone().into(),
        key: c.tls_key.clone().into(),
        ca: c.tls_ca.clone().into(),
    })?;
    Ok(Some(format!("{} (CA {})", c.tls_cert, c.tls_ca)))
}

fn registry(cfg: &Config) -> Result<Option<String>, String> {
    let timeout = Duration::from_millis(cfg.registry.timeout_ms);
    let t = Instant::now();
    if cfg.registry_url.is_empty() {
        let file = cfg.registry_file();
        if !file.exists() {
            return Ok(Some(format!("{} will be created", file.display())));
        }
        let reg = registry::SqliteRegistry::open(&file)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        reg.set_busy_timeout(timeout)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let rev =
            registry::Registry::revision(&reg).map_err(|e| format!("{}: {e}", file.display()))?;
        return Ok(Some(format!(
            "{} answered in {} (revision {rev})",
            file.display(),
            ms(t)
        )));
    }
    let url = redact(&cfg.registry_url);
    let reg = registry::PostgresRegistry::connect(&cfg.registry_url, timeout)
        .map_err(|e| format!("{url}: {e} (deadline {timeout:?})"))?;
    let rev = registry::Registry::revision(&reg)
        .map_err(|e| format!("{url}: {e} (deadline {timeout:?})"))?;
    Ok(Some(format!(
        "{url} answered in {} (revision {rev})",
        ms(t)
    )))
}

fn redis(url: &str, timeout_ms: u64) -> Result<Option<String>, String> {
    if url.is_empty() {
        return Ok(None);
    }
    let shown = redact(url);
    let target = crate::link::resp::Target::parse(url).map_err(|e| redact(&e))?;
    let t = Instant::now();
    let deadline = t + Duration::from_millis(timeout_ms);
    crate::link::resp::Conn::connect(&target, deadline)
        .map_err(|e| format!("{shown}: {e} (deadline {timeout_ms} ms)"))?;
    Ok(Some(format!("{shown} answered PING in {}", ms(t))))
}

fn kafka(cfg: &Config) -> Result<Option<String>, String> {
    let e = &cfg.events;
    if e.kafka_brokers.is_empty() {
        return Ok(None);
    }
    let brokers = crate::ingest::brokers::Brokers::new(e);
    let timeout = Duration::from_millis(cfg.registry.timeout_ms);
    let p = brokers
        .probe(&e.kafka_topic, timeout)
        .map_err(|err| format!("{}: {err}", brokers.list))?;
    if p.partitions == 0 {
        return Err(format!(
            "{}: topic {:?} has no partitions (or does not exist)",
            brokers.list, e.kafka_topic
        ));
    }
    Ok(Some(format!(
        "{}{} answered in {:.1} ms: topic {:?}, {} partitions",
        brokers.list,
        if brokers.tls() { " (TLS)" } else { "" },
        p.took.as_secs_f64() * 1e3,
        e.kafka_topic,
        p.partitions
    )))
}

fn tcp(host: &str, port: u16, timeout: Duration) -> Result<String, String> {
    use std::net::ToSocketAddrs;
    let t = Instant::now();
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}:{port}: {e}"))?
        .collect();
    let mut last = format!("{host}:{port} resolves to nothing");
    for a in addrs {
        match std::net::TcpStream::connect_timeout(&a, timeout) {
            Ok(_) => return Ok(format!("{a} connected in {}", ms(t))),
            Err(e) => last = format!("{a}: {e} (deadline {timeout:?})"),
        }
    }
    Err(last)
}

fn upstream(cfg: &Config) -> Result<Option<String>, String> {
    if cfg.chat.upstream_url.is_empty() {
        return Ok(None);
    }
    let url = crate::chat::upstream::Url::parse(&cfg.chat.upstream_url)?;
    tcp(
        &url.host,
        url.port,
        Duration::from_millis(cfg.chat.upstream_timeout_ms),
    )
    .map(Some)
}

fn egress(cfg: &Config) -> Result<Option<String>, String> {
    use crate::egress::client::Addr;
    let e = &cfg.egress;
    if e.remote.is_empty() {
        return Ok(None);
    }
    let timeout = Duration::from_millis(e.connect_timeout_ms);
    match Addr::parse(&e.remote)? {
        Addr::Unix(path) => std::os::unix::net::UnixStream::connect(&path)
            .map(|_| Some(format!("{} connected", path.display())))
            .map_err(|err| format!("{}: {err}", path.display())),
        Addr::Tcp(a) => {
            let (host, port) = a
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse().ok()?)))
                .ok_or_else(|| format!("{a}: not host:port"))?;
            tcp(host, port, timeout).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(
            redact("postgres://gw:hunter2@db:5432/reg"),
            "postgres://gw:***@db:5432/reg"
        );
        assert_eq!(
            redact("redis://:pw@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("postgres://gw@db/reg"), "postgres://gw@db/reg");
    }
}
