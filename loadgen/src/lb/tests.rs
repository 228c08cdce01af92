//! Tests of the balancer through its handle: forwarding, new connections
//! only to enabled backends, and a closed upstream closing the client.

use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

fn echo() -> (SocketAddrV4, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let SocketAddr::V4(a) = l.local_addr().unwrap() else {
        unreachable!()
    };
    let n = Arc::new(AtomicU64::new(0));
    let n2 = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            n2.fetch_add(1, Relaxed);
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                while let Ok(k) = s.read(&mut b) {
                    if k == 0 || s.write_all(&b[..k]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (a, n)
}

fn round_trip(lb: &Lb, msg: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(lb.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(msg).unwrap();
    let mut got = vec![0u8; msg.len()];
    s.read_exact(&mut got).unwrap();
    got
}

#[test]
fn forwards_and_sends_new_connections_only_to_enabled_backends() {
    let (a, na) = echo();
    let (b, nb) = echo();
    let lb = Lb::start(
        "127.0.0.1:0".parse().unwrap(),
        vec![
            Backend {
                gateway: a,
                admin: None,
                enabled: true,
            },
            Backend {
                gateway: b,
                admin: None,
                enabled: true,
            },
        ],
        100,
        vec![],
    )
    .unwrap();
    for k in 0..10u8 {
        let msg = vec![k; 100_000];
        assert_eq!(round_trip(&lb, &msg), msg);
    }
    assert!(na.load(Relaxed) > 0 && nb.load(Relaxed) > 0);
    lb.set_enabled(0, false);
    std::thread::sleep(Duration::from_millis(150));
    let before = na.load(Relaxed);
    for _ in 0..10 {
        assert_eq!(round_trip(&lb, b"x"), b"x");
    }
    assert_eq!(
        na.load(Relaxed),
        before,
        "a disabled backend gets nothing new"
    );
    lb.set_enabled(1, false);
    std::thread::sleep(Duration::from_millis(150));
    let mut s = TcpStream::connect(lb.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(s.read(&mut b).unwrap_or(0), 0, "no backend: closed");
    let st = lb.stats();
    assert!(st.no_backend >= 1, "{st:?}");
    assert_eq!(st.per_backend.iter().sum::<u64>(), 20);
    lb.stop();
}

#[test]
fn a_closed_upstream_closes_the_client() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let SocketAddr::V4(a) = l.local_addr().unwrap() else {
        unreachable!()
    };
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let _ = s.write_all(b"bye");
        }
    });
    let lb = Lb::start(
        "127.0.0.1:0".parse().unwrap(),
        vec![Backend {
            gateway: a,
            admin: None,
            enabled: true,
        }],
        10,
        vec![],
    )
    .unwrap();
    let mut s = TcpStream::connect(lb.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"bye");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(lb.stats().open, 0);
    lb.stop();
}
