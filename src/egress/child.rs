//! The `gatewayd egress` child a node (or the registry CLI) starts when no
//! remote egress is named: its start (an empty environment, its one stdout
//! line saying where it listens: `wire::LISTENING`) and its stop.

use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::client::Addr;

/// A `gatewayd egress` child: stopped (SIGTERM, then SIGKILL) when dropped;
/// it also dies with its parent (PR_SET_PDEATHSIG).
pub struct EgressChild {
    child: Child,
    socket: Option<PathBuf>,
    /// Where it listens: `--listen` with a TCP port 0 resolved (its one
    /// stdout line, `wire::LISTENING`).
    pub addr: Addr,
    /// Its stdout, kept open (it writes one line, then nothing).
    _stdout: Option<std::process::ChildStdout>,
}

impl EgressChild {
    /// Starts `exe egress --listen addr` with an EMPTY environment (no
    /// registry URL, no token, no proxy variables reach it; RUST_LOG is
    /// passed on) and waits, up to 10 s, until it says where it listens
    /// (`wire::LISTENING` on its stdout: the real port when `addr` is
    /// `host:0`) or, for a program that does not say, until it accepts
    /// connections at an address given whole.
    pub fn spawn(
        exe: &Path,
        addr: &Addr,
        allow_private_cidrs: &[String],
        max_in_flight: usize,
    ) -> Result<EgressChild, String> {
        use std::io::BufRead as _;
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(exe);
        cmd.arg("egress")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--max-in-flight")
            .arg(max_in_flight.to_string())
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if !allow_private_cidrs.is_empty() {
            cmd.arg("--allow-private-cidrs")
                .arg(allow_private_cidrs.join(","));
        }
        if let Some(v) = std::env::var_os("RUST_LOG") {
            cmd.env("RUST_LOG", v);
        }
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting the egress ({}): {e}", exe.display()))?;
        // Its one line, read on a thread of its own so the wait below keeps
        // its deadline; the pipe comes back with it and stays open.
        let stdout = child.stdout.take().expect("piped");
        let (said, heard) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("egress-start".into())
            .spawn(move || {
                let mut r = std::io::BufReader::new(stdout);
                let mut line = String::new();
                let _ = r.read_line(&mut line);
                let _ = said.send((line, r.into_inner()));
            })
            .map_err(|e| format!("egress: start reader thread: {e}"))?;
        let mut me = EgressChild {
            child,
            socket: match addr {
                Addr::Unix(p) => Some(p.clone()),
                Addr::Tcp(_) => None,
            },
            addr: addr.clone(),
            _stdout: None,
        };
        // Port 0 is known only from the line.
        let given_whole = match addr {
            Addr::Unix(_) => true,
            Addr::Tcp(a) => !a.ends_with(":0"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match heard.try_recv() {
                Ok((line, out)) => {
                    me._stdout = Some(out);
                    if let Some(bound) = line.trim_end().strip_prefix(super::wire::LISTENING) {
                        me.addr = Addr::parse(bound)?;
                        return Ok(me);
                    }
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {}
            }
            let up = given_whole
                && match addr {
                    Addr::Unix(p) => UnixStream::connect(p).is_ok(),
                    Addr::Tcp(a) => TcpStream::connect(a.as_str()).is_ok(),
                };
            if up {
                return Ok(me);
            }
            if let Ok(Some(status)) = me.child.try_wait() {
                return Err(format!("the egress exited at start: {status}"));
            }
            if Instant::now() > deadline {
                return Err(format!("the egress did not listen on {addr} within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for EgressChild {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by its pid; it has not been reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
    }
}
