//! `[portal]`: the developer portal, a web page for bot authors on its own
//! listener (issue 16, docs/portal.md). Never on the admin port.

use std::net::SocketAddr;

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Portal {
    /// Where the portal listens; loopback by default (put a TLS proxy in
    /// front to serve it further). Port 0: any free port (written to
    /// `<data dir>/gatewayd.portal-addr`).
    pub addr: SocketAddr,
    /// Off: no portal listener at all.
    pub enabled: bool,
    /// Signed-in sessions held at once (the oldest is dropped past it).
    pub max_sessions: usize,
    /// How long a session lives without use (seconds).
    pub session_idle_s: u64,
    /// How long a session lives at most (seconds).
    pub session_max_s: u64,
    /// Failed sign-ins per source address per minute before it is refused
    /// (the REST limit on invalid requests per address applies as well).
    pub signin_failures_per_address: u32,
    /// Failed sign-ins per minute from all addresses before every sign-in
    /// is refused for the rest of the minute.
    pub signin_failures_global: u32,
    /// Mark the cookie `Secure` even without the node's own TLS (set this
    /// when a TLS proxy serves the portal).
    pub secure_cookie: bool,
}

impl Default for Portal {
    fn default() -> Self {
        Portal {
            addr: "127.0.0.1:8090".parse().expect("literal"),
            enabled: true,
            max_sessions: 1024,
            session_idle_s: 30 * 60,
            session_max_s: 12 * 60 * 60,
            signin_failures_per_address: 10,
            signin_failures_global: 200,
            secure_cookie: false,
        }
    }
}

/// The portal's flags of `gatewayd run`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct PortalArgs {
    /// Listener of the developer portal, never the admin port (default 127.0.0.1:8090; port 0: any
    /// free port, written to <data dir>/gatewayd.portal-addr) [config: portal.addr]
    #[arg(long)]
    pub portal_addr: Option<SocketAddr>,
    /// Do not serve the developer portal [config: portal.enabled = false]
    #[arg(long)]
    pub no_portal: bool,
    /// How long a portal session lives without use, seconds (default 1800)
    /// [config: portal.session_idle_s]
    #[arg(long)]
    pub portal_session_idle_s: Option<u64>,
    /// Failed portal sign-ins per source address per minute before it is refused (default 10)
    /// [config: portal.signin_failures_per_address]
    #[arg(long)]
    pub portal_signin_failures_per_address: Option<u32>,
    /// Failed portal sign-ins per minute from all addresses before every sign-in is refused
    /// (default 200) [config: portal.signin_failures_global]
    #[arg(long)]
    pub portal_signin_failures_global: Option<u32>,
}

impl PortalArgs {
    pub fn apply(&self, p: &mut Portal) {
        if let Some(a) = self.portal_addr {
            p.addr = a;
        }
        if self.no_portal {
            p.enabled = false;
        }
        if let Some(s) = self.portal_session_idle_s {
            p.session_idle_s = s;
        }
        if let Some(n) = self.portal_signin_failures_per_address {
            p.signin_failures_per_address = n;
        }
        if let Some(n) = self.portal_signin_failures_global {
            p.signin_failures_global = n;
        }
    }
}

impl Portal {
    pub fn validate(&self, admin: SocketAddr) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if self.addr == admin && self.addr.port() != 0 {
            return Err(format!(
                "portal.addr {} is the admin address: the portal has its own listener",
                self.addr
            ));
        }
        if !(1..=65_536).contains(&self.max_sessions) {
            return Err("portal.max_sessions must be 1..=65536".into());
        }
        if self.session_idle_s == 0 || self.session_max_s < self.session_idle_s {
            return Err("portal.session_idle_s must be positive and at most session_max_s".into());
        }
        Ok(())
    }
}
