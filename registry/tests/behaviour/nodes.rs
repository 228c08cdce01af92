//! Cluster membership (migration 9): node numbers are claimed lowest free
//! first, renewed by their holder only, free again once lapsed, and a live
//! node's link address is what others find.

use super::Store;

pub fn cluster_nodes_claim_renew_lapse_and_find(store: &dyn Store) {
    let (a, b) = (store.open(), store.open());
    let t = 1_700_000_000_000u64;
    let ttl = 5_000;
    let na = a
        .register_node("instance-a", "127.0.0.1:7001", t, ttl)
        .unwrap();
    let nb = b
        .register_node("instance-b", "127.0.0.1:7002", t, ttl)
        .unwrap();
    assert_eq!((na, nb), (1, 2), "lowest free numbers, one each");
    assert_eq!(
        b.node_link(na, t + 1).unwrap().as_deref(),
        Some("127.0.0.1:7001")
    );
    assert_eq!(
        a.live_nodes(t + 1).unwrap(),
        vec![
            (1, "127.0.0.1:7001".to_string()),
            (2, "127.0.0.1:7002".to_string())
        ]
    );
    // Only the holder renews; another instance cannot take a live number.
    assert!(a
        .heartbeat_node(na, "instance-a", "127.0.0.1:7001", t + 4_000, ttl)
        .unwrap());
    assert!(!b
        .heartbeat_node(na, "instance-b", "127.0.0.1:7002", t + 4_000, ttl)
        .unwrap());
    // b stops renewing: its number lapses, is not found, and is reused.
    assert_eq!(a.node_link(nb, t + ttl + 1).unwrap(), None);
    let nc = a
        .register_node("instance-c", "127.0.0.1:7003", t + ttl + 1, ttl)
        .unwrap();
    assert_eq!(nc, 2, "a lapsed number is free again");
    // Liveness is the process's, not the number's: b's number is held
    // again, by c; b is not live (crash recovery proves death by this).
    assert!(a.instance_live("instance-a", t + ttl + 1).unwrap());
    assert!(a.instance_live("instance-c", t + ttl + 1).unwrap());
    assert!(!a.instance_live("instance-b", t + ttl + 1).unwrap());
    assert!(!a.instance_live("instance-never", t).unwrap());
    assert!(!b
        .heartbeat_node(nb, "instance-b", "127.0.0.1:7002", t + ttl + 2, ttl)
        .unwrap());
    // A clean stop gives the number up; only its holder can.
    b.leave_node(na, "instance-b").unwrap();
    assert!(a.node_link(na, t + 5_000).unwrap().is_some());
    a.leave_node(na, "instance-a").unwrap();
    assert_eq!(a.node_link(na, t + 5_000).unwrap(), None);
    assert!(
        !a.instance_live("instance-a", t + 5_000).unwrap(),
        "it left"
    );
    // Bad input is refused, not stored.
    assert!(a.register_node("", "x", t, ttl).is_err());
    assert!(a.register_node("i", &"x".repeat(300), t, ttl).is_err());
}
