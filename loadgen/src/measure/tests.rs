//! Tests of the measurements' helpers: close codes as text, the world of
//! given tokens, source addresses per session count.

use std::net::Ipv4Addr;

use super::common::{close_codes, token_world};
use super::opts::{DEFAULT_INTENTS, SESSIONS_PER_SOURCE};
use crate::fleet::spread_sources;
use crate::session::Counters;

#[test]
fn close_codes_and_token_world() {
    let mut c = Counters::default();
    c.closes[0] = 2;
    c.closes[16] = 1;
    assert_eq!(close_codes(&c), "{4000: 2, other: 1}");
    let w = token_world(&["a".into(), "b".into()], DEFAULT_INTENTS, 4);
    assert_eq!(w.bots.len(), 2);
    assert_eq!(w.bots[1].token, "b");
    assert_eq!(w.bots[0].shards, 4);
    assert!(w.sees_content(0));
    assert_eq!(
        spread_sources(Ipv4Addr::new(127, 0, 0, 2), 60_000, SESSIONS_PER_SOURCE),
        vec![
            Ipv4Addr::new(127, 0, 0, 2),
            Ipv4Addr::new(127, 0, 0, 3),
            Ipv4Addr::new(127, 0, 0, 4)
        ]
    );
}
