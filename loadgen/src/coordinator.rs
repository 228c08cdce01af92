//! The fleet coordinator: identify concurrency, REST rate limits and
//! cooldowns shared by every loadgen process (or bot) that connects.
//!
//! Wire protocol: UTF-8 JSON Lines over TCP, one request and one response
//! per line, one in-flight request per connection. The full description,
//! including the choices made where issue 5 is silent, is in
//! `loadgen/README.md`.
//!
//! Design: one thread per connection (bounded by [`Config::max_connections`]),
//! one mutex around all limiter state and one condvar. A blocking request
//! (`identify_acquire`, `http_acquire`) waits on the condvar in FIFO order
//! per bucket and polls its own socket for EOF every
//! [`LIVENESS_POLL`], so a client that disconnects while queued leaves the
//! queue instead of consuming a grant. Time is kept in microseconds since
//! the coordinator started (monotonic clock).

use serde_json::{json, Map, Value};
use std::collections::{HashMap, VecDeque};
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// Longest accepted request line in bytes, excluding the newline.
pub const MAX_LINE: usize = 64 * 1024;

/// How often a blocked request checks whether its client is still there.
pub const LIVENESS_POLL: Duration = Duration::from_millis(100);

const US_PER_SEC: u64 = 1_000_000;

/// Coordinator settings. [`Config::default`] matches the CLI defaults.
#[derive(Clone, Debug)]
pub struct Config {
    /// Identify buckets: shard `s` identifies in bucket `s % max_concurrency`.
    pub max_concurrency: u64,
    /// Minimum time between two identify grants of one bucket.
    pub identify_spacing: Duration,
    /// Global REST limit: grants per sliding second (0 disables it).
    pub global_per_second: u32,
    /// Concurrent client connections; further ones are refused.
    pub max_connections: usize,
    /// Queued requests per identify or REST bucket; further ones get an error.
    pub max_waiters_per_bucket: usize,
    /// Live cooldown keys; expired keys are dropped before refusing new ones.
    pub max_cooldown_keys: usize,
    /// REST buckets (route names, learned limits, learned hash aliases),
    /// each map separately; idle or expired entries are dropped first.
    pub max_http_buckets: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrency: 1,
            identify_spacing: Duration::from_millis(5250),
            global_per_second: 50,
            max_connections: 1024,
            max_waiters_per_bucket: 4096,
            max_cooldown_keys: 100_000,
            max_http_buckets: 65_536,
        }
    }
}

struct Shared {
    cfg: Config,
    epoch: Instant,
    state: Mutex<State>,
    cv: Condvar,
    connections: AtomicUsize,
    next_id: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Keyed by (application key, shard % max_concurrency).
    identify: HashMap<(String, u64), IdentifyBucket>,
    routes: HashMap<String, Route>,
    limits: HashMap<String, Limit>,
    aliases: HashMap<String, String>,
    global_grants: VecDeque<u64>,
    global_paused_until: u64,
    cooldowns: HashMap<String, u128>,
}

#[derive(Default)]
struct IdentifyBucket {
    queue: VecDeque<u64>,
    next_allowed: u64,
}

#[derive(Default)]
struct Route {
    queue: VecDeque<u64>,
    held_by: Option<u64>,
}

#[derive(Default)]
struct Limit {
    remaining: Option<u64>,
    reset_at: Option<u64>,
}

enum Step {
    Done,
    /// Not yet; wake at this time (µs) at the latest, or on a notification.
    WaitUntil(Option<u64>),
}

/// Runs the coordinator on `listener` until the listener fails permanently.
/// Blocks the calling thread; each connection gets its own thread.
pub fn serve(listener: TcpListener, config: Config) -> io::Result<()> {
    if config.max_concurrency == 0 {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "max_concurrency must be at least 1",
        ));
    }
    let shared = Arc::new(Shared {
        cfg: config,
        epoch: Instant::now(),
        state: Mutex::new(State::default()),
        cv: Condvar::new(),
        connections: AtomicUsize::new(0),
        next_id: AtomicU64::new(1),
    });
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::InvalidInput => return Err(e),
            Err(_) => {
                // EMFILE, ECONNABORTED, ...: transient, do not spin.
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if shared.connections.fetch_add(1, Ordering::SeqCst) >= shared.cfg.max_connections {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
            refuse(stream, "too many connections");
            continue;
        }
        let sh = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name("coord-conn".into())
            .stack_size(1024 * 1024)
            .spawn(move || {
                let _guard = ConnGuard(Arc::clone(&sh));
                sh.handle(stream);
            });
        if spawned.is_err() {
            // The closure was dropped unrun, so no guard exists to undo
            // the count; undo it here (the stream is closed by the drop).
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

struct ConnGuard(Arc<Shared>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

fn refuse(mut stream: TcpStream, why: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = stream.write_all(line(&err(why)).as_bytes());
    let _ = stream.shutdown(Shutdown::Write);
}

fn line(v: &Value) -> String {
    let mut s = v.to_string();
    s.push('\n');
    s
}

fn ok() -> Value {
    json!({"ok": true})
}

fn err(msg: impl Into<String>) -> Value {
    json!({"ok": false, "error": msg.into()})
}

/// Shortens client-supplied text quoted in error messages.
fn clip(s: &str) -> String {
    if s.chars().count() <= 64 {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(64).collect();
        t.push('…');
        t
    }
}

enum LineRead {
    Line,
    Eof,
    TooLong,
}

/// Reads one `\n`-terminated line of at most [`MAX_LINE`] bytes into `buf`
/// (without the newline). A final line without newline counts as a line.
fn read_bounded_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<LineRead> {
    buf.clear();
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(if buf.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        match avail.iter().position(|&b| b == b'\n') {
            Some(i) => {
                if buf.len() + i > MAX_LINE {
                    return Ok(LineRead::TooLong);
                }
                buf.extend_from_slice(&avail[..i]);
                r.consume(i + 1);
                return Ok(LineRead::Line);
            }
            None => {
                let n = avail.len();
                if buf.len() + n > MAX_LINE {
                    return Ok(LineRead::TooLong);
                }
                buf.extend_from_slice(avail);
                r.consume(n);
            }
        }
    }
}

/// True unless the peer has closed (EOF) or the socket failed. Data waiting
/// to be read (a pipelined request) counts as alive.
fn peer_alive(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    let r = stream.peek(&mut b);
    let _ = stream.set_nonblocking(false);
    match r {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted),
    }
}

/// An unsigned integer given as a JSON number or a decimal string, at most
/// `i64::MAX` (Int64-safe).
fn get_uint(obj: &Map<String, Value>, field: &str) -> Result<Option<u64>, String> {
    let bad = || {
        format!("\"{field}\" must be a non-negative integer (number or decimal string) no larger than 9223372036854775807")
    };
    let n = match obj.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64().ok_or_else(bad)?,
        Some(Value::String(s)) => {
            let t = s.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            t.parse::<u64>().map_err(|_| bad())?
        }
        Some(_) => return Err(bad()),
    };
    if n > i64::MAX as u64 {
        return Err(bad());
    }
    Ok(Some(n))
}

fn require_uint(obj: &Map<String, Value>, field: &str) -> Result<u64, String> {
    get_uint(obj, field)?.ok_or_else(|| format!("missing \"{field}\""))
}

fn require_str<'a>(obj: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    match obj.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(format!("\"{field}\" must not be empty")),
        Some(_) => Err(format!("\"{field}\" must be a string")),
        None => Err(format!("missing \"{field}\"")),
    }
}

/// A header value as text: strings as-is, numbers and booleans printed.
fn header_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Seconds (float) to microseconds, clamped to [0, 1 day].
fn secs_to_us(s: &str) -> Option<u64> {
    let f: f64 = s.parse().ok()?;
    if !f.is_finite() || f < 0.0 {
        return None;
    }
    Some((f.min(86_400.0) * US_PER_SEC as f64).ceil() as u64)
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn handle(&self, stream: TcpStream) {
        let conn = self.id();
        let _ = stream.set_nodelay(true);
        let read_half = match stream.try_clone() {
            Ok(s) => s,
            Err(_) => return,
        };
        let mut reader = BufReader::with_capacity(8 * 1024, read_half);
        let mut writer = &stream;
        let mut held: Vec<String> = Vec::new();
        let mut buf = Vec::with_capacity(256);
        loop {
            match read_bounded_line(&mut reader, &mut buf) {
                Ok(LineRead::Line) => {}
                Ok(LineRead::Eof) | Err(_) => break,
                Ok(LineRead::TooLong) => {
                    let msg = format!("line longer than {MAX_LINE} bytes; closing");
                    let _ = writer.write_all(line(&err(msg)).as_bytes());
                    let _ = stream.shutdown(Shutdown::Write);
                    // Lingering close: drain (bounded) what the client
                    // already sent, so closing with unread data does not
                    // reset the connection and destroy the error line.
                    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
                    let _ = io::copy(&mut reader.take(1 << 20), &mut io::sink());
                    break;
                }
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            let mut alive = || peer_alive(&stream);
            let Some(resp) = self.dispatch(conn, &buf, &mut held, &mut alive) else {
                break; // the client left while its request was queued
            };
            if writer.write_all(line(&resp).as_bytes()).is_err() {
                break;
            }
        }
        self.release_all(conn, &held);
    }

    /// Answers one request line; `None` when the client disconnected while
    /// the request was waiting.
    fn dispatch(
        &self,
        conn: u64,
        raw: &[u8],
        held: &mut Vec<String>,
        alive: &mut dyn FnMut() -> bool,
    ) -> Option<Value> {
        let text = match std::str::from_utf8(raw) {
            Ok(t) => t,
            Err(_) => return Some(err("request is not valid UTF-8")),
        };
        let v: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return Some(err(format!("malformed JSON: {e}"))),
        };
        let Some(obj) = v.as_object() else {
            return Some(err("request must be a JSON object"));
        };
        let op = match obj.get("op") {
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Some(err("\"op\" must be a string")),
            None => return Some(err("missing \"op\"")),
        };
        let r = match op {
            "ping" => Ok(Some(ok())),
            "identify_acquire" => self.identify_acquire(obj, alive),
            "http_acquire" => self.http_acquire(conn, obj, held, alive),
            "http_release" => self.http_release(conn, obj, held).map(Some),
            "cooldown_acquire" => self.cooldown_acquire(obj).map(Some),
            other => Err(format!("unknown op \"{}\"", clip(other))),
        };
        match r {
            Ok(v) => v,
            Err(e) => Some(err(e)),
        }
    }

    /// Waits on the condvar until `step` says done. Every [`LIVENESS_POLL`]
    /// checks the client; if it is gone, runs `cancel` and returns false.
    fn block(
        &self,
        alive: &mut dyn FnMut() -> bool,
        mut step: impl FnMut(&mut State, u64) -> Step,
        cancel: impl FnOnce(&mut State),
    ) -> bool {
        let mut last_check = Instant::now();
        let mut st = self.lock();
        loop {
            let now = self.now();
            let deadline = match step(&mut st, now) {
                Step::Done => {
                    drop(st);
                    self.cv.notify_all();
                    return true;
                }
                Step::WaitUntil(d) => d,
            };
            let mut timeout = LIVENESS_POLL;
            if let Some(d) = deadline {
                timeout = timeout.min(Duration::from_micros(d.saturating_sub(now).max(1)));
            }
            st = self
                .cv
                .wait_timeout(st, timeout)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            if last_check.elapsed() >= LIVENESS_POLL {
                drop(st);
                let still_there = alive();
                last_check = Instant::now();
                st = self.lock();
                if !still_there {
                    cancel(&mut st);
                    drop(st);
                    self.cv.notify_all();
                    return false;
                }
            }
        }
    }

    fn identify_acquire(
        &self,
        obj: &Map<String, Value>,
        alive: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Value>, String> {
        let shard = require_uint(obj, "shard_id")?;
        // Optional extension: "key" names the application, so one
        // coordinator serves a fleet of many bots (each its own buckets).
        // Without it every request shares one application's buckets.
        let key = match obj.get("key") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(k)) if k.len() <= 128 => k.clone(),
            Some(_) => return Err("key must be a string of at most 128 bytes".into()),
        };
        let bucket = (key, shard % self.cfg.max_concurrency);
        let spacing = self
            .cfg
            .identify_spacing
            .as_micros()
            .min(u64::MAX as u128 / 2) as u64;
        let me = self.id();
        {
            let mut st = self.lock();
            if st.identify.len() >= 65_536 && !st.identify.contains_key(&bucket) {
                let now = self.now();
                st.identify
                    .retain(|_, b| !b.queue.is_empty() || b.next_allowed > now);
            }
            let b = st.identify.entry(bucket.clone()).or_default();
            if b.queue.len() >= self.cfg.max_waiters_per_bucket {
                return Err("too many waiters on this identify bucket".into());
            }
            b.queue.push_back(me);
        }
        let granted = self.block(
            alive,
            |st, now| {
                let b = st.identify.entry(bucket.clone()).or_default();
                if b.queue.front() != Some(&me) {
                    return Step::WaitUntil(None);
                }
                if now < b.next_allowed {
                    return Step::WaitUntil(Some(b.next_allowed));
                }
                b.queue.pop_front();
                // +1 µs: the next grant is strictly more than `spacing`
                // after this one, whatever the clock's rounding.
                b.next_allowed = now.saturating_add(spacing).saturating_add(1);
                Step::Done
            },
            |st| {
                if let Some(b) = st.identify.get_mut(&bucket) {
                    b.queue.retain(|&w| w != me);
                }
            },
        );
        Ok(granted.then(ok))
    }

    fn http_acquire(
        &self,
        conn: u64,
        obj: &Map<String, Value>,
        held: &mut Vec<String>,
        alive: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Value>, String> {
        let name = require_str(obj, "bucket")?.to_string();
        let exempt = match obj.get("global_exempt") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("\"global_exempt\" must be a boolean".into()),
        };
        if held.contains(&name) {
            return Err("bucket already held by this connection; http_release it first".into());
        }
        let me = self.id();
        {
            let mut st = self.lock();
            if !st.routes.contains_key(&name) && st.routes.len() >= self.cfg.max_http_buckets {
                st.routes
                    .retain(|_, r| r.held_by.is_some() || !r.queue.is_empty());
                if st.routes.len() >= self.cfg.max_http_buckets {
                    return Err("too many http buckets".into());
                }
            }
            let r = st.routes.entry(name.clone()).or_default();
            if r.queue.len() >= self.cfg.max_waiters_per_bucket {
                return Err("too many waiters on this http bucket".into());
            }
            r.queue.push_back(me);
        }
        let cap = self.cfg.global_per_second as usize;
        let granted = self.block(
            alive,
            |st, now| {
                let State {
                    routes,
                    limits,
                    aliases,
                    global_grants,
                    global_paused_until,
                    ..
                } = st;
                let route = routes.entry(name.clone()).or_default();
                if route.queue.front() != Some(&me) || route.held_by.is_some() {
                    return Step::WaitUntil(None);
                }
                let key = aliases.get(&name).unwrap_or(&name);
                if let Some(l) = limits.get_mut(key) {
                    if let Some(reset) = l.reset_at {
                        if now >= reset {
                            l.remaining = None;
                            l.reset_at = None;
                        } else if l.remaining == Some(0) {
                            return Step::WaitUntil(Some(reset));
                        }
                    }
                }
                if !exempt {
                    if *global_paused_until > now {
                        return Step::WaitUntil(Some(*global_paused_until));
                    }
                    if cap > 0 {
                        while global_grants
                            .front()
                            .is_some_and(|&t| t + US_PER_SEC <= now)
                        {
                            global_grants.pop_front();
                        }
                        if global_grants.len() >= cap {
                            let first = *global_grants.front().unwrap_or(&now);
                            return Step::WaitUntil(Some(first + US_PER_SEC));
                        }
                        global_grants.push_back(now);
                    }
                }
                route.queue.pop_front();
                route.held_by = Some(conn);
                if let Some(l) = limits.get_mut(key) {
                    if let Some(n) = l.remaining {
                        l.remaining = Some(n.saturating_sub(1));
                    }
                }
                Step::Done
            },
            |st| {
                if let Some(r) = st.routes.get_mut(&name) {
                    r.queue.retain(|&w| w != me);
                }
            },
        );
        if granted {
            held.push(name);
        }
        Ok(granted.then(ok))
    }

    fn http_release(
        &self,
        conn: u64,
        obj: &Map<String, Value>,
        held: &mut Vec<String>,
    ) -> Result<Value, String> {
        let name = require_str(obj, "bucket")?.to_string();
        let status = get_uint(obj, "status")?.unwrap_or(0);
        let headers = match obj.get("headers") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => return Err("\"headers\" must be an object".into()),
        };
        if !held.contains(&name) {
            return Err("bucket not held by this connection".into());
        }
        let mut hv: HashMap<String, String> = HashMap::new();
        for (k, v) in headers.into_iter().flatten() {
            if let Some(t) = header_text(v) {
                hv.insert(k.to_ascii_lowercase(), t);
            }
        }
        let now = self.now();
        let max = self.cfg.max_http_buckets;
        let mut st = self.lock();
        if let Some(hash) = hv.get("x-ratelimit-bucket").filter(|h| !h.is_empty()) {
            if !st.aliases.contains_key(&name) && st.aliases.len() >= max {
                let State {
                    aliases, routes, ..
                } = &mut *st;
                aliases.retain(|route, _| routes.contains_key(route));
            }
            if st.aliases.contains_key(&name) || st.aliases.len() < max {
                st.aliases.insert(name.clone(), hash.clone());
            }
        }
        let key = st
            .aliases
            .get(&name)
            .cloned()
            .unwrap_or_else(|| name.clone());
        let remaining = hv.get("x-ratelimit-remaining").and_then(|s| {
            s.parse::<u64>().ok().or_else(|| {
                s.parse::<f64>()
                    .ok()
                    .filter(|f| *f >= 0.0)
                    .map(|f| f as u64)
            })
        });
        let reset_after = hv
            .get("x-ratelimit-reset-after")
            .and_then(|s| secs_to_us(s));
        let retry_after = hv.get("retry-after").and_then(|s| secs_to_us(s));
        let global = hv
            .get("x-ratelimit-global")
            .is_some_and(|s| s.eq_ignore_ascii_case("true"));
        if status == 429 && global {
            let until = now + retry_after.unwrap_or(US_PER_SEC);
            st.global_paused_until = st.global_paused_until.max(until);
        }
        let bucket_429 = status == 429 && !global;
        if remaining.is_some() || reset_after.is_some() || bucket_429 {
            if !st.limits.contains_key(&key) && st.limits.len() >= max {
                st.limits.retain(|_, l| l.reset_at.is_some_and(|r| r > now));
            }
            if st.limits.contains_key(&key) || st.limits.len() < max {
                let l = st.limits.entry(key).or_default();
                if let Some(n) = remaining {
                    l.remaining = Some(n);
                }
                if let Some(d) = reset_after {
                    l.reset_at = Some(now + d);
                }
                if bucket_429 {
                    l.remaining = Some(0);
                    let until = now + retry_after.or(reset_after).unwrap_or(US_PER_SEC);
                    l.reset_at = Some(l.reset_at.map_or(until, |r| r.max(until)));
                }
            }
        }
        if let Some(r) = st.routes.get_mut(&name) {
            if r.held_by == Some(conn) {
                r.held_by = None;
            }
        }
        drop(st);
        held.retain(|h| h != &name);
        self.cv.notify_all();
        Ok(ok())
    }

    fn release_all(&self, conn: u64, held: &[String]) {
        if held.is_empty() {
            return;
        }
        let mut st = self.lock();
        for name in held {
            if let Some(r) = st.routes.get_mut(name) {
                if r.held_by == Some(conn) {
                    r.held_by = None;
                }
            }
        }
        drop(st);
        self.cv.notify_all();
    }

    fn cooldown_acquire(&self, obj: &Map<String, Value>) -> Result<Value, String> {
        let key = require_str(obj, "key")?;
        let window_ms = require_uint(obj, "window_ms")?;
        let now = self.now() as u128;
        let mut st = self.lock();
        if let Some(&until) = st.cooldowns.get(key) {
            if until > now {
                let left_ms = (until - now).div_ceil(1000);
                return Ok(json!({"ok": false, "retry_after_ms": left_ms.to_string()}));
            }
        } else if st.cooldowns.len() >= self.cfg.max_cooldown_keys {
            st.cooldowns.retain(|_, &mut until| until > now);
            if st.cooldowns.len() >= self.cfg.max_cooldown_keys {
                return Err("too many cooldown keys".into());
            }
        }
        st.cooldowns
            .insert(key.to_string(), now + window_ms as u128 * 1000);
        Ok(json!({"ok": true, "retry_after_ms": "0"}))
    }
}
