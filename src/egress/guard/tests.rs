//! The SSRF guard's unit tests: which addresses it refuses (every listed
//! range edge to edge, embedded IPv4, the allow list) and how URLs parse.

use std::time::Duration;

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn default() -> Policy {
    Policy::default()
}

/// Every range of REST.md's list: its first, a middle and its last address
/// are refused; the addresses just outside it (when not in another
/// refused range) are allowed.
#[test]
fn every_listed_range_is_refused_edge_to_edge() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            "0.0.0.0/8",
            &["0.0.0.0", "0.1.2.3", "0.255.255.255"],
            &["1.0.0.0"],
        ),
        (
            "10.0.0.0/8",
            &["10.0.0.0", "10.1.2.3", "10.255.255.255"],
            &["9.255.255.255", "11.0.0.0"],
        ),
        (
            "100.64.0.0/10",
            &["100.64.0.0", "100.100.1.1", "100.127.255.255"],
            &["100.63.255.255", "100.128.0.0"],
        ),
        (
            "127.0.0.0/8",
            &["127.0.0.1", "127.1.2.3", "127.255.255.255"],
            &["126.255.255.255", "128.0.0.0"],
        ),
        (
            "169.254.0.0/16",
            &["169.254.0.0", "169.254.169.254", "169.254.255.255"],
            &["169.253.255.255", "169.255.0.0"],
        ),
        (
            "172.16.0.0/12",
            &["172.16.0.0", "172.20.1.1", "172.31.255.255"],
            &["172.15.255.255", "172.32.0.0"],
        ),
        (
            "192.0.0.0/24",
            &["192.0.0.0", "192.0.0.8", "192.0.0.255"],
            &["192.0.1.0"],
        ),
        (
            "192.0.2.0/24",
            &["192.0.2.0", "192.0.2.1", "192.0.2.255"],
            &["192.0.3.0"],
        ),
        (
            "192.168.0.0/16",
            &["192.168.0.0", "192.168.1.1", "192.168.255.255"],
            &["192.167.255.255", "192.169.0.0"],
        ),
        (
            "198.18.0.0/15",
            &["198.18.0.0", "198.19.1.1", "198.19.255.255"],
            &["198.17.255.255", "198.20.0.0"],
        ),
        (
            "198.51.100.0/24",
            &["198.51.100.0", "198.51.100.7", "198.51.100.255"],
            &["198.51.99.255", "198.51.101.0"],
        ),
        (
            "203.0.113.0/24",
            &["203.0.113.0", "203.0.113.9", "203.0.113.255"],
            &["203.0.112.255", "203.0.114.0"],
        ),
        (
            "224.0.0.0/4",
            &["224.0.0.0", "239.255.255.250", "239.255.255.255"],
            &["223.255.255.255"],
        ),
        (
            "240.0.0.0/4",
            &["240.0.0.0", "250.1.1.1", "255.255.255.255"],
            &[],
        ),
        ("::/128", &["::"], &[]),
        ("::1/128", &["::1"], &[]),
        (
            "64:ff9b::/96",
            &["64:ff9b::", "64:ff9b::a00:1", "64:ff9b::ffff:ffff"],
            &["64:ff9b::1:0:0"],
        ),
        (
            "64:ff9b:1::/48",
            &["64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff"],
            &[],
        ),
        (
            "2002::/16",
            &[
                "2002::",
                "2002:a00:1::1",
                "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ],
            &["2001:4860::1", "2003::1"],
        ),
        (
            "2001:db8::/32",
            &[
                "2001:db8::",
                "2001:db8:1::1",
                "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            ],
            &["2001:db9::1"],
        ),
        (
            "fc00::/7",
            &[
                "fc00::",
                "fd12:3456::1",
                "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ],
            &["fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe00::"],
        ),
        (
            "fe80::/10",
            &[
                "fe80::",
                "fe80::1",
                "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ],
            &["fec0::1"],
        ),
        (
            "ff00::/8",
            &[
                "ff00::",
                "ff02::1",
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ],
            &[],
        ),
    ];
    let p = default();
    for (range, inside, outside) in cases {
        let want = Cidr::parse(range).unwrap();
        assert!(DENY.contains(&want), "{range} missing from DENY");
        for a in *inside {
            assert_eq!(
                p.refuses(ip(a)),
                Some(want),
                "{a} should be refused by {range}"
            );
        }
        for a in *outside {
            assert_eq!(
                p.refuses(ip(a)),
                None,
                "{a} (outside {range}) should be allowed"
            );
        }
    }
}

#[test]
fn public_addresses_are_allowed() {
    for a in [
        "1.1.1.1",
        "8.8.8.8",
        "93.184.216.34",
        "2606:4700::1111",
        "2001:4860:4860::8888",
    ] {
        assert_eq!(default().refuses(ip(a)), None, "{a}");
    }
}

#[test]
fn ipv4_mapped_ipv6_is_judged_as_its_ipv4() {
    let p = default();
    for a in [
        "::ffff:10.0.0.1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:0.0.0.0",
        "::ffff:192.168.1.1",
        "::ffff:a00:1",
    ] {
        assert!(p.refuses(ip(a)).is_some(), "{a}");
    }
    assert_eq!(p.refuses(ip("::ffff:8.8.8.8")), None);
    assert_eq!(
        p.refuses(ip("::ffff:10.0.0.1")),
        Some(Cidr::v4(10, 0, 0, 0, 8))
    );
}

#[test]
fn nat64_and_6to4_embedding_private_ipv4_are_refused() {
    let p = default();
    // 64:ff9b::7f00:1 is 127.0.0.1 through NAT64; 2002:7f00:1:: is 6to4 of it.
    for a in [
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::",
        "2002:a9fe:a9fe::1",
        "64:ff9b::808:808",
    ] {
        assert!(p.refuses(ip(a)).is_some(), "{a}");
    }
}

#[test]
fn the_allow_list_allows_exactly_what_it_names() {
    let p = Policy::new(&["127.0.0.0/8".into()]).unwrap();
    assert_eq!(p.refuses(ip("127.0.0.1")), None);
    assert_eq!(p.refuses(ip("127.255.0.9")), None);
    // Its mapped form reaches the same place.
    assert_eq!(p.refuses(ip("::ffff:127.0.0.1")), None);
    for a in [
        "10.0.0.1",
        "169.254.169.254",
        "::1",
        "192.168.0.1",
        "64:ff9b::7f00:1",
        "2002:7f00:1::",
    ] {
        assert!(p.refuses(ip(a)).is_some(), "{a} must stay refused");
    }
    let p = Policy::new(&["10.1.0.0/16".into(), "::1".into()]).unwrap();
    assert_eq!(p.refuses(ip("10.1.2.3")), None);
    assert_eq!(p.refuses(ip("::1")), None);
    assert!(p.refuses(ip("10.2.0.1")).is_some());
    assert!(p.refuses(ip("127.0.0.1")).is_some());
}

#[test]
fn cidr_parsing_is_strict() {
    assert_eq!(
        Cidr::parse("127.0.0.0/8").unwrap(),
        Cidr::v4(127, 0, 0, 0, 8)
    );
    assert_eq!(Cidr::parse("10.0.0.7").unwrap(), Cidr::v4(10, 0, 0, 7, 32));
    assert_eq!(Cidr::parse("0.0.0.0/0").unwrap(), Cidr::v4(0, 0, 0, 0, 0));
    assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
    assert!(!Cidr::parse("0.0.0.0/0").unwrap().contains(ip("::1")));
    for bad in [
        "127.0.0.1/8",
        "10.0.0.0/33",
        "::/129",
        "localhost",
        "10.0.0.0/-1",
        "",
        "10/8",
    ] {
        assert!(Cidr::parse(bad).is_err(), "{bad:?}");
    }
}

fn url(s: &str) -> Target {
    parse_url(s).unwrap_or_else(|e| panic!("{s}: {e:?}"))
}

#[test]
fn urls_parse_into_host_port_and_path() {
    let t = url("https://Bot.Example.com/interactions?x=1#frag");
    assert_eq!(
        (t.https, t.host.as_str(), t.port, t.path.as_str()),
        (true, "bot.example.com", 443, "/interactions?x=1")
    );
    assert_eq!(t.host_header(), "bot.example.com");
    let t = url("http://127.0.0.1:8080");
    assert_eq!(
        (t.port, t.path.as_str(), t.literal),
        (8080, "/", Some(ip("127.0.0.1")))
    );
    assert_eq!(t.host_header(), "127.0.0.1:8080");
    let t = url("http://[::ffff:10.0.0.1]:81/x");
    assert_eq!(t.literal, Some(ip("::ffff:10.0.0.1")));
    assert_eq!(t.host_header(), "[::ffff:10.0.0.1]:81");
    let t = url("HTTP://h?q");
    assert_eq!((t.https, t.path.as_str()), (false, "/?q"));
}

#[test]
fn bad_urls_are_refused_as_bad_url() {
    for s in [
        "ftp://example.com/",
        "example.com",
        "http://",
        "http://user:pw@example.com/",
        "http://example.com:0/",
        "http://example.com:65536/",
        "http://example.com:+80/",
        "http://example.com:080/",
        "http://exa mple.com/",
        "http://exa%6dple.com/",
        "http://[::1/",
        "http://[10.0.0.1]/",
        "http://[::1]x/",
        "http://example.com/\u{e9}",
        "http://ex\\ample.com/",
        &format!("http://example.com/{}", "a".repeat(MAX_URL)),
        &format!("http://{}.com/", "a".repeat(260)),
    ] {
        match parse_url(s) {
            Err((Reason::BadUrl, _)) => {}
            other => panic!("{s:?}: {other:?}"),
        }
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(2)
}

#[test]
fn ip_literal_urls_are_checked_without_dns() {
    for s in [
        "http://127.0.0.1/",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://[2002:7f00:1::]/",
        "http://0.0.0.0:80/",
    ] {
        match resolve(&url(s), &default(), soon()) {
            Err((Reason::RefusedAddress, _)) => {}
            other => panic!("{s}: {other:?}"),
        }
    }
    let allowed = Policy::new(&["127.0.0.0/8".into()]).unwrap();
    assert_eq!(
        resolve(&url("http://127.0.0.1:9/"), &allowed, soon()).unwrap(),
        vec!["127.0.0.1:9".parse::<SocketAddr>().unwrap()]
    );
}

#[test]
fn names_resolving_to_refused_addresses_are_refused() {
    // `localhost` resolves to 127.0.0.1 (and maybe ::1) from /etc/hosts.
    match resolve(&url("http://localhost:9/"), &default(), soon()) {
        Err((Reason::RefusedAddress, why)) => assert!(why.contains("localhost"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Numeric forms getaddrinfo accepts but the literal parser does not
    // (127.1, 0x7f.1, 2130706433) are names: their answers are checked.
    for s in ["http://127.1/", "http://2130706433/", "http://0x7f.0.0.1/"] {
        match resolve(&url(s), &default(), soon()) {
            Err((Reason::RefusedAddress | Reason::DnsFailed, _)) => {}
            other => panic!("{s}: {other:?}"),
        }
    }
}

#[test]
fn a_name_that_does_not_resolve_is_dns_failed() {
    match resolve(&url("http://no-such-host.invalid/"), &default(), soon()) {
        Err((Reason::DnsFailed | Reason::Timeout, _)) => {}
        other => panic!("{other:?}"),
    }
}
