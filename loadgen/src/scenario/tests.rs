//! Tests of the scenarios' pure helpers: the PostgreSQL URL rewriting of
//! the revocation scenario (its proxy sits between gatewayd and the
//! registry). The scenarios themselves run in the workspace's
//! tests/loadgen_scenarios.rs.

use super::revocation::{pg_addr, replace_host_port};

#[test]
fn urls() {
    assert_eq!(
        replace_host_port(
            "postgres://u:p@127.0.0.1:5432/db?x=1",
            "127.0.0.1:9".parse().unwrap()
        ),
        "postgres://u:p@127.0.0.1:9/db?x=1"
    );
    assert_eq!(
        replace_host_port("postgresql://127.0.0.1/db", "127.0.0.1:9".parse().unwrap()),
        "postgresql://127.0.0.1:9/db"
    );
    assert_eq!(
        pg_addr("postgres://u@127.0.0.1:6000/x").unwrap().port(),
        6000
    );
}
