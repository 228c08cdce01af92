//! What any store must keep right whatever its engine: u64 ids and
//! bitsets through signed 64-bit columns, a large batch probe answered in
//! order, and no secret (token, password) stored in any form.

use super::{Backend, Store};

/// Lease renewal's batch answers every pair, in order (PostgreSQL in one
/// statement, SQLite one probe a pair).
pub fn installed_checks_a_large_batch_in_order(reg: &dyn Backend) {
    let (app, _) = reg.create_application("bot", 0, 1).unwrap();
    let s1 = reg.create_server("a", 1).unwrap();
    let s2 = reg.create_server("b", 1).unwrap();
    reg.install(app.id, s2.id, 0).unwrap();
    assert!(reg.installed(&[]).unwrap().is_empty());
    let pairs: Vec<(u64, u64)> = (0..5000u64)
        .map(|i| match i % 4 {
            0 => (app.id, s1.id),
            1 => (app.id, s2.id),
            2 => (app.id + 1, s2.id),
            _ => (u64::MAX - i, s2.id),
        })
        .collect();
    let got = reg.installed(&pairs).unwrap();
    assert_eq!(got.len(), pairs.len());
    for (i, ok) in got.iter().enumerate() {
        assert_eq!(*ok, i % 4 == 1, "pair {i}");
    }
}

/// Ids and bitsets with the top bit set (negative as the signed 64-bit
/// integers both engines store) come back as they went in.
pub fn u64_ids_keep_their_bits(reg: &dyn Backend) {
    let (app, _) = reg.create_application("bot", 0, 1).unwrap();
    // Ids and bitsets with the top bit set are negative as BIGINT.
    let high = u64::MAX - (3 << 22);
    let s = reg.create_server_with_id(high, "High", u64::MAX).unwrap();
    assert_eq!(s.owner_id, u64::MAX);
    let inst = reg.install(app.id, high, u64::MAX).unwrap();
    assert_eq!(inst.permissions, u64::MAX);
    let shards = 5;
    let want = ((high >> 22) % shards) as u32;
    for shard in 0..shards as u32 {
        let got = reg.servers_for_shard(app.id, shard, shards as u32).unwrap();
        assert_eq!(got == vec![high], shard == want, "shard {shard}");
    }
    let snap = reg.server_snapshot(high).unwrap().unwrap();
    assert_eq!(snap.server.owner_id, u64::MAX);
    assert_eq!(reg.installed(&[(app.id, high)]).unwrap(), vec![true]);
    assert_eq!(reg.list_servers().unwrap()[0].id, high);
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Tokens and developer passwords are stored only as salted hashes: none
/// of a token (nor its secret segments) nor a password is anywhere in the
/// store, while the registry is open and after it closed.
pub fn secrets_are_never_stored(store: &dyn Store) {
    let reg = store.open();
    let (app, token) = reg.create_application("secret-bot", 0, 1).unwrap();
    let reset = reg.reset_token(app.id).unwrap();
    let (pw, pw2) = ("a password of developers", "the second password");
    reg.create_developer("alice", pw).unwrap();
    reg.set_developer_password("alice", pw2).unwrap();
    let mut secrets: Vec<String> = vec![pw.into(), pw2.into()];
    for t in [&token, &reset] {
        let p: Vec<&str> = t.split('.').collect();
        secrets.extend([t.to_string(), p[1].to_string(), p[2].to_string()]);
    }
    let check = |bytes: &[u8]| {
        assert!(contains(bytes, b"secret-bot"), "sanity: the data was read");
        for s in &secrets {
            assert!(!contains(bytes, s.as_bytes()), "a secret is stored");
        }
    };
    check(&store.stored_bytes());
    drop(reg);
    check(&store.stored_bytes());
}
