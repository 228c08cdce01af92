//! Users, members, roles of members, bans and DM channels.

use super::Backend;
use registry::permissions::*;
use registry::*;

fn server_with_roles(reg: &dyn Backend) -> (Server, Role, Role) {
    let s = reg.create_server("People", 1).unwrap();
    let low = reg.create_role(s.id, "low", 0).unwrap();
    let high = reg.create_role(s.id, "high", KICK_MEMBERS).unwrap();
    (s, low, high)
}

pub fn members_roles_and_their_rules(reg: &dyn Backend) {
    let (s, low, high) = server_with_roles(reg);
    let bob = reg.create_user("bob").unwrap();
    assert_eq!(reg.user(bob.id).unwrap().unwrap(), bob);
    assert_eq!(reg.member(s.id, bob.id).unwrap(), None);
    assert!(matches!(
        reg.add_member(s.id, 999),
        Err(RegistryError::NotFound { what: "user", .. })
    ));
    let m = reg.add_member(s.id, bob.id).unwrap();
    assert_eq!((m.user.username.as_str(), m.role_ids.len()), ("bob", 0));
    assert_eq!(
        reg.add_member(s.id, bob.id).unwrap(),
        m,
        "joining twice is one membership"
    );

    assert!(reg.add_member_role(s.id, bob.id, high.id).unwrap());
    assert!(
        !reg.add_member_role(s.id, bob.id, high.id).unwrap(),
        "already has it"
    );
    assert!(reg.add_member_role(s.id, bob.id, low.id).unwrap());
    let mut want = vec![low.id, high.id];
    want.sort_unstable();
    assert_eq!(reg.member(s.id, bob.id).unwrap().unwrap().role_ids, want);
    assert!(reg.remove_member_role(s.id, bob.id, high.id).unwrap());
    assert!(!reg.remove_member_role(s.id, bob.id, high.id).unwrap());
    assert_eq!(
        reg.member(s.id, bob.id).unwrap().unwrap().role_ids,
        vec![low.id]
    );

    // Not assignable: @everyone, another server's role, a bot's managed role.
    assert!(matches!(
        reg.add_member_role(s.id, bob.id, s.id),
        Err(RegistryError::Invalid(_))
    ));
    let other = reg.create_server("Other", 1).unwrap();
    let foreign = reg.create_role(other.id, "x", 0).unwrap();
    assert!(matches!(
        reg.add_member_role(s.id, bob.id, foreign.id),
        Err(RegistryError::Invalid(_))
    ));
    let (app, _) = reg.create_application("a-bot", 0, 1).unwrap();
    let inst = reg.install(app.id, s.id, VIEW_CHANNEL).unwrap();
    assert!(matches!(
        reg.add_member_role(s.id, bob.id, inst.managed_role_id.unwrap()),
        Err(RegistryError::Invalid(_))
    ));
    assert!(matches!(
        reg.add_member_role(s.id, bob.id, 12345),
        Err(RegistryError::NotFound { what: "role", .. })
    ));
    let carol = reg.create_user("carol").unwrap();
    assert!(matches!(
        reg.add_member_role(s.id, carol.id, low.id),
        Err(RegistryError::NotFound { what: "member", .. })
    ));

    let m = reg.set_member_roles(s.id, bob.id, &[high.id]).unwrap();
    assert_eq!(m.role_ids, vec![high.id]);
    // A deleted role leaves the members that had it.
    reg.apply_state(&StateChange::DeleteRole {
        server_id: s.id,
        role_id: high.id,
    })
    .unwrap();
    assert!(reg
        .member(s.id, bob.id)
        .unwrap()
        .unwrap()
        .role_ids
        .is_empty());

    assert!(reg.remove_member(s.id, bob.id).unwrap(), "kick");
    assert!(!reg.remove_member(s.id, bob.id).unwrap());
    assert_eq!(reg.member(s.id, bob.id).unwrap(), None);
    assert!(reg.user(bob.id).unwrap().is_some(), "a kick keeps the user");
    // Deleting the server takes its members with it.
    reg.add_member(s.id, bob.id).unwrap();
    reg.delete_server(s.id).unwrap();
    assert_eq!(reg.member(s.id, bob.id).unwrap(), None);
}

pub fn bans_end_membership_and_block_rejoining(reg: &dyn Backend) {
    let (s, low, _) = server_with_roles(reg);
    let bob = reg.create_user("bob").unwrap();
    reg.add_member(s.id, bob.id).unwrap();
    reg.add_member_role(s.id, bob.id, low.id).unwrap();
    assert_eq!(
        reg.ban(s.id, bob.id, Some("spam")).unwrap(),
        BanOutcome {
            new: true,
            was_member: true
        }
    );
    assert_eq!(reg.member(s.id, bob.id).unwrap(), None);
    assert_eq!(
        reg.ban(s.id, bob.id, None).unwrap(),
        BanOutcome {
            new: false,
            was_member: false
        },
        "banning twice changes nothing"
    );
    assert!(matches!(
        reg.add_member(s.id, bob.id),
        Err(RegistryError::Invalid(_))
    ));
    // A user who never joined can be banned; an unknown id cannot.
    let carol = reg.create_user("carol").unwrap();
    assert!(!reg.ban(s.id, carol.id, None).unwrap().was_member);
    assert!(matches!(
        reg.ban(s.id, 4242, None),
        Err(RegistryError::NotFound { what: "user", .. })
    ));
    assert!(reg.unban(s.id, bob.id).unwrap());
    assert!(!reg.unban(s.id, bob.id).unwrap());
    let back = reg.add_member(s.id, bob.id).unwrap();
    assert!(
        back.role_ids.is_empty(),
        "a returning member starts without roles"
    );
}

pub fn member_pages_and_dm_channels(reg: &dyn Backend) {
    let (s, low, high) = server_with_roles(reg);
    let mut ids = Vec::new();
    for i in 0..7 {
        let u = reg.create_user(&format!("user{i}")).unwrap();
        reg.add_member(s.id, u.id).unwrap();
        ids.push(u.id);
    }
    reg.add_member_role(s.id, ids[2], low.id).unwrap();
    reg.add_member_role(s.id, ids[2], high.id).unwrap();
    reg.add_member_role(s.id, ids[5], high.id).unwrap();
    ids.sort_unstable();
    let page = reg.list_members(s.id, 0, 3).unwrap();
    assert_eq!(page.iter().map(|m| m.user.id).collect::<Vec<_>>(), ids[..3]);
    let rest = reg.list_members(s.id, ids[2], 100).unwrap();
    assert_eq!(rest.iter().map(|m| m.user.id).collect::<Vec<_>>(), ids[3..]);
    let all = reg.list_members(s.id, 0, 1000).unwrap();
    for m in &all {
        assert_eq!(
            m.role_ids,
            reg.member(s.id, m.user.id).unwrap().unwrap().role_ids
        );
    }
    assert_eq!(
        reg.list_members(s.id, 0, 0).unwrap().len(),
        1,
        "a limit of 0 is 1"
    );
    assert!(reg
        .list_members(s.id, *ids.last().unwrap(), 10)
        .unwrap()
        .is_empty());

    let (a, b, c) = (ids[0], ids[1], ids[2]);
    let ab = reg.open_dm(a, b).unwrap();
    assert_eq!(reg.open_dm(b, a).unwrap(), ab, "one channel per pair");
    let ac = reg.open_dm(c, a).unwrap();
    assert_ne!(ab, ac);
    let mut want = vec![(ab, b), (ac, c)];
    want.sort_unstable();
    assert_eq!(reg.dm_channels_of(a).unwrap(), want);
    assert_eq!(reg.dm_channels_of(b).unwrap(), vec![(ab, a)]);
    assert!(matches!(reg.open_dm(a, a), Err(RegistryError::Invalid(_))));
}

pub fn demo_server_has_people_ranked_around_the_bot(reg: &dyn Backend) {
    let seed = reg.seed_demo().unwrap().unwrap();
    let snap = reg.server_snapshot(seed.server_id).unwrap().unwrap();
    let inst = reg
        .installation(seed.app.id, seed.server_id)
        .unwrap()
        .unwrap();
    let pos = |id: u64| snap.roles.iter().find(|r| r.id == id).unwrap().position;
    let bot = pos(inst.managed_role_id.unwrap());
    let members = reg.list_members(seed.server_id, 0, 100).unwrap();
    let names: Vec<&str> = members.iter().map(|m| m.user.username.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    let top = |name: &str| {
        let m = members.iter().find(|m| m.user.username == name).unwrap();
        m.role_ids.iter().map(|&r| pos(r)).max().unwrap_or(0)
    };
    assert_eq!(
        snap.server.owner_id,
        members
            .iter()
            .find(|m| m.user.username == "alice")
            .unwrap()
            .user
            .id
    );
    assert!(top("carol") > bot, "the moderator outranks the bot");
    assert!(
        top("bob") < bot && top("dave") < bot,
        "members rank below it"
    );
}

pub fn an_interaction_is_claimed_once(reg: &dyn Backend) {
    let t = 1_800_000_000_000;
    assert!(reg
        .claim_interaction(1_200_000_000_000_000_001, "node-a", t)
        .unwrap());
    assert!(
        !reg.claim_interaction(1_200_000_000_000_000_001, "node-b", t)
            .unwrap(),
        "another node"
    );
    assert!(
        !reg.claim_interaction(1_200_000_000_000_000_001, "node-a", t)
            .unwrap(),
        "the same node again"
    );
    assert!(reg
        .claim_interaction(1_200_000_000_000_000_002, "node-b", t)
        .unwrap());
    let rev = reg.revision().unwrap();
    // A pruning claim (id % CLAIM_PRUNE_EVERY == 0) an hour later forgets the old ones.
    let later = t + registry::CLAIM_KEEP_MS + 1;
    let pruner = 256 * 4_700_000_000_000_000;
    assert!(reg.claim_interaction(pruner, "node-a", later).unwrap());
    assert!(
        reg.claim_interaction(1_200_000_000_000_000_001, "node-c", later)
            .unwrap(),
        "pruned, so claimable"
    );
    assert_eq!(
        reg.revision().unwrap(),
        rev,
        "claims are not registry changes"
    );
}

pub fn an_open_interaction_is_settled_once(reg: &dyn Backend) {
    use registry::interaction_state::*;
    let t = 1_800_000_000_000;
    let p = registry::PendingInteraction {
        id: 1_300_000_000_000_000_001,
        application_id: 42,
        token_digest: [7; 32],
        state: WAITING,
        opened_at_ms: t,
        expires_at_ms: t + 900_000,
        node: "node-a".into(),
        detail: r#"{"kind":2}"#.into(),
        original_id: None,
        followups: vec![],
    };
    let rev = reg.revision().unwrap();
    reg.put_interaction(&p, t).unwrap();
    assert_eq!(reg.interaction(p.id).unwrap().as_ref(), Some(&p));
    assert_eq!(
        reg.interaction_by_token(&[7; 32]).unwrap().as_ref(),
        Some(&p)
    );
    assert_eq!(reg.interaction_by_token(&[8; 32]).unwrap(), None);
    assert_eq!(
        reg.waiting_interactions("node-a", 10).unwrap(),
        vec![p.clone()]
    );
    assert!(reg.waiting_interactions("node-b", 10).unwrap().is_empty());
    assert!(
        !reg.settle_interaction(p.id, ANSWERED, t + 1, None).unwrap(),
        "opened before the window's start: too late"
    );
    assert!(
        reg.settle_interaction(p.id, DEFERRED, t, Some(98)).unwrap(),
        "the first response"
    );
    assert_eq!(
        reg.interaction(p.id).unwrap().unwrap().original_id,
        Some(98),
        "its message's id, in the same write"
    );
    assert!(
        !reg.settle_interaction(p.id, FAILED, 0, None).unwrap(),
        "the miss lost"
    );
    assert!(
        !reg.settle_interaction(p.id, ANSWERED, 0, Some(97)).unwrap(),
        "a second response lost"
    );
    assert_eq!(
        reg.interaction(p.id).unwrap().unwrap().original_id,
        Some(98),
        "a settle that lost records nothing"
    );
    reg.set_interaction_messages(p.id, Some(99), &[100, 101])
        .unwrap();
    let got = reg.interaction(p.id).unwrap().unwrap();
    assert_eq!((got.state, got.original_id), (DEFERRED, Some(99)));
    assert_eq!(got.followups, vec![100, 101]);
    assert!(reg.waiting_interactions("node-a", 10).unwrap().is_empty());
    // A pruning put (id % CLAIM_PRUNE_EVERY == 0) after the token expired.
    let pruner = registry::PendingInteraction {
        id: 256 * 4_800_000_000_000_000,
        token_digest: [9; 32],
        ..p.clone()
    };
    reg.put_interaction(&pruner, t + 900_001).unwrap();
    assert_eq!(
        reg.interaction(p.id).unwrap(),
        None,
        "expired rows are pruned"
    );
    assert_eq!(reg.revision().unwrap(), rev, "not registry changes");
}
