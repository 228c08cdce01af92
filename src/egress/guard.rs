//! The SSRF guard (ADR-11, REST.md "Outbound calls to bot-supplied URLs"):
//! what a bot-supplied URL may name, and which addresses it may reach.
//!
//! A URL is parsed strictly (http or https, a host, an optional port, no
//! user info); its host is resolved under a deadline (getaddrinfo on a
//! helper thread: std's lookup has no timeout of its own); EVERY address
//! the answer holds is checked against the deny list, and the caller then
//! connects to exactly those addresses (no second lookup). An IP literal
//! skips DNS and is checked the same way. `::ffff:a.b.c.d` is mapped back
//! to IPv4 and checked again; NAT64 and 6to4 are refused whole (either can
//! embed a private IPv4 address behind a public-looking IPv6 one).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::reason::Reason;

/// Longest URL accepted.
pub const MAX_URL: usize = 2048;
/// Longest host name (RFC 1035).
const MAX_HOST: usize = 253;
/// getaddrinfo calls that may be outstanding at once (a lookup past its
/// deadline keeps its thread until the system resolver gives up).
const MAX_LOOKUPS: usize = 64;
static LOOKUPS: AtomicUsize = AtomicUsize::new(0);

/// An address range, `10.0.0.0/8` or `fc00::/7`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl Cidr {
    pub const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Cidr {
        Cidr {
            net: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            len,
        }
    }

    const fn v6(segs: [u16; 8], len: u8) -> Cidr {
        Cidr {
            net: IpAddr::V6(Ipv6Addr::new(
                segs[0], segs[1], segs[2], segs[3], segs[4], segs[5], segs[6], segs[7],
            )),
            len,
        }
    }

    /// `a.b.c.d/n`, `x::y/n`, or a bare address (a /32 or /128).
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (addr, len) = match s.trim().split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s.trim(), None),
        };
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: not an address range (e.g. 127.0.0.0/8)"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0-{max}"))?,
        };
        let c = Cidr { net, len };
        if c.masked(net) != net {
            return Err(format!(
                "{s:?}: host bits set (did you mean {}?)",
                c.normal()
            ));
        }
        Ok(c)
    }

    fn masked(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(a) => {
                let m = u32::MAX.checked_shl(32 - self.len as u32).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
            }
            IpAddr::V6(a) => {
                let m = u128::MAX.checked_shl(128 - self.len as u32).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
            }
        }
    }

    fn normal(&self) -> String {
        format!("{}/{}", self.masked(self.net), self.len)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.net.is_ipv4() && self.masked(ip) == self.net
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

/// REST.md's deny list, in its order (plus 64:ff9b:1::/48, the local-use
/// NAT64 prefix of RFC 8215, which can embed private IPv4 too).
/// `::ffff:0:0/96` is not here: it is mapped to IPv4 and checked again.
pub const DENY: &[Cidr] = &[
    Cidr::v4(0, 0, 0, 0, 8),
    Cidr::v4(10, 0, 0, 0, 8),
    Cidr::v4(100, 64, 0, 0, 10),
    Cidr::v4(127, 0, 0, 0, 8),
    Cidr::v4(169, 254, 0, 0, 16),
    Cidr::v4(172, 16, 0, 0, 12),
    Cidr::v4(192, 0, 0, 0, 24),
    Cidr::v4(192, 0, 2, 0, 24),
    Cidr::v4(192, 168, 0, 0, 16),
    Cidr::v4(198, 18, 0, 0, 15),
    Cidr::v4(198, 51, 100, 0, 24),
    Cidr::v4(203, 0, 113, 0, 24),
    Cidr::v4(224, 0, 0, 0, 4),
    Cidr::v4(240, 0, 0, 0, 4),
    Cidr::v6([0; 8], 128),
    Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128),
    Cidr::v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96),
    Cidr::v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
    Cidr::v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16),
    Cidr::v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
    Cidr::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
    Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
    Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
];

/// What may be reached: everything but [`DENY`], plus exactly the ranges
/// an operator named (`egress.allow_private_cidrs`).
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub allow: Vec<Cidr>,
}

impl Policy {
    pub fn new(allow: &[String]) -> Result<Policy, String> {
        Ok(Policy {
            allow: allow
                .iter()
                .map(|s| Cidr::parse(s))
                .collect::<Result<_, _>>()?,
        })
    }

    /// None if `ip` may be reached, else the deny range it falls in.
    pub fn refuses(&self, ip: IpAddr) -> Option<Cidr> {
        // `::ffff:a.b.c.d` reaches a.b.c.d: judge it as that.
        let v4 = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        let judged = v4.unwrap_or(ip);
        if self
            .allow
            .iter()
            .any(|c| c.contains(judged) || c.contains(ip))
        {
            return None;
        }
        DENY.iter().find(|c| c.contains(judged)).copied()
    }
}

/// A parsed bot-supplied URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    /// Lower-case host name, or the IP literal (without brackets).
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    /// Set when the host is an IP literal (no DNS).
    pub literal: Option<IpAddr>,
}

impl Target {
    /// The `Host` header's value.
    pub fn host_header(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        let host = match self.literal {
            Some(IpAddr::V6(_)) => format!("[{}]", self.host),
            _ => self.host.clone(),
        };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Parses `http(s)://host[:port][/path][?query]` strictly: anything else
/// (user info, other schemes, odd characters, an empty host) is `bad_url`.
pub fn parse_url(url: &str) -> Result<Target, (Reason, String)> {
    let bad = |why: &str| (Reason::BadUrl, why.to_string());
    if url.len() > MAX_URL {
        return Err(bad("URL longer than 2048 bytes"));
    }
    if url.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(bad("URL holds spaces, controls or non-ASCII bytes"));
    }
    let (https, rest) = if let Some(r) = strip_prefix_ci(url, "https://") {
        (true, r)
    } else if let Some(r) = strip_prefix_ci(url, "http://") {
        (false, r)
    } else {
        return Err(bad("scheme must be http or https"));
    };
    let rest = rest.split('#').next().unwrap_or("");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err(bad("user info in a URL is refused"));
    }
    let (host, port) = if let Some(r) = authority.strip_prefix('[') {
        let close = r.find(']').ok_or_else(|| bad("unclosed [ in host"))?;
        let (h, after) = r.split_at(close);
        let after = &after[1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(bad("junk after ]")),
        };
        (h, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => {
            if https {
                443
            } else {
                80
            }
        }
        Some(p) => plain_digits(p)
            .then(|| p.parse::<u16>().ok())
            .flatten()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad("port must be 1-65535"))?,
    };
    if host.is_empty() || host.len() > MAX_HOST {
        return Err(bad("host is empty or too long"));
    }
    let literal = if authority.starts_with('[') {
        Some(IpAddr::V6(
            host.parse::<Ipv6Addr>()
                .map_err(|_| bad("bracketed host is not an IPv6 address"))?,
        ))
    } else {
        host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    };
    if literal.is_none()
        && !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    {
        return Err(bad("host holds characters a DNS name cannot"));
    }
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    Ok(Target {
        https,
        host: literal.map_or_else(|| host.to_ascii_lowercase(), |ip| ip.to_string()),
        port,
        path,
        literal,
    })
}

/// A port is written in plain digits: no sign, no leading zero.
fn plain_digits(p: &str) -> bool {
    !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !p.starts_with('0')
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

/// The addresses to connect to, every one of them allowed by `policy`:
/// the literal, or every address the host resolves to before `deadline`.
/// One refused address refuses the URL (a name that answers a private
/// address among public ones is not trusted with either).
pub fn resolve(
    target: &Target,
    policy: &Policy,
    deadline: Instant,
) -> Result<Vec<SocketAddr>, (Reason, String)> {
    let addrs = match target.literal {
        Some(ip) => vec![SocketAddr::new(ip, target.port)],
        None => lookup(&target.host, target.port, deadline)?,
    };
    if addrs.is_empty() {
        return Err((Reason::DnsFailed, format!("{}: no addresses", target.host)));
    }
    for a in &addrs {
        if let Some(range) = policy.refuses(a.ip()) {
            return Err((
                Reason::RefusedAddress,
                format!("{} is {} (in {range}, refused)", target.host, a.ip()),
            ));
        }
    }
    Ok(addrs)
}

/// getaddrinfo on a helper thread, given up on at `deadline`.
fn lookup(host: &str, port: u16, deadline: Instant) -> Result<Vec<SocketAddr>, (Reason, String)> {
    if LOOKUPS.fetch_add(1, Ordering::SeqCst) >= MAX_LOOKUPS {
        LOOKUPS.fetch_sub(1, Ordering::SeqCst);
        return Err((Reason::DnsFailed, "too many lookups in flight".into()));
    }
    let (tx, rx) = crossbeam_channel::bounded(1);
    let name = host.to_string();
    let spawned = std::thread::Builder::new()
        .name("egress-dns".into())
        .spawn(move || {
            let r = (name.as_str(), port)
                .to_socket_addrs()
                .map(|it| it.take(32).collect::<Vec<_>>());
            LOOKUPS.fetch_sub(1, Ordering::SeqCst);
            let _ = tx.send(r);
        });
    if spawned.is_err() {
        LOOKUPS.fetch_sub(1, Ordering::SeqCst);
        return Err((Reason::DnsFailed, "cannot start a lookup thread".into()));
    }
    let wait = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(wait) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err((Reason::DnsFailed, format!("{host}: {e}"))),
        Err(_) => Err((Reason::Timeout, format!("{host}: lookup took too long"))),
    }
}

#[cfg(test)]
mod tests;
