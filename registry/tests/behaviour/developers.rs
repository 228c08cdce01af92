//! Developer accounts, the applications they own, and privileged-intent
//! requests an operator approves (issue 29).

use super::Backend;
use registry::*;

const PW: &str = "correct horse battery";

pub fn developer_sign_in_good_and_bad(reg: &dyn Backend) {
    let alice = reg.create_developer("alice", PW).unwrap();
    assert_eq!(alice.name, "alice");
    assert!(alice.id > 0 && alice.created_at_ms > 0);
    assert_eq!(reg.developer(alice.id).unwrap(), Some(alice.clone()));
    assert_eq!(reg.developer(alice.id + 1).unwrap(), None);

    assert_eq!(
        reg.developer_sign_in("alice", PW).unwrap(),
        Some(alice.clone())
    );
    assert_eq!(
        reg.developer_sign_in("alice", "correct horse batterY")
            .unwrap(),
        None
    );
    assert_eq!(reg.developer_sign_in("alice", "").unwrap(), None);
    assert_eq!(
        reg.developer_sign_in("Alice", PW).unwrap(),
        None,
        "names are exact"
    );
    assert_eq!(
        reg.developer_sign_in("bob", PW).unwrap(),
        None,
        "unknown name"
    );
    assert_eq!(reg.developer_sign_in("", PW).unwrap(), None);
    assert_eq!(
        reg.developer_sign_in("alice", &"x".repeat(MAX_PASSWORD_BYTES + 1))
            .unwrap(),
        None
    );

    // A new password: the old one stops working at once.
    assert!(reg
        .set_developer_password("alice", "another long password")
        .unwrap());
    assert_eq!(reg.developer_sign_in("alice", PW).unwrap(), None);
    assert_eq!(
        reg.developer_sign_in("alice", "another long password")
            .unwrap(),
        Some(alice.clone())
    );
    assert!(!reg.set_developer_password("nobody", PW).unwrap());
    assert!(matches!(
        reg.set_developer_password("alice", "too short"),
        Err(RegistryError::Invalid(_))
    ));

    assert_eq!(reg.list_developers().unwrap(), vec![alice.clone()]);
    assert!(reg.delete_developer("alice").unwrap());
    assert!(!reg.delete_developer("alice").unwrap());
    assert_eq!(reg.developer(alice.id).unwrap(), None);
    assert_eq!(
        reg.developer_sign_in("alice", "another long password")
            .unwrap(),
        None
    );
    assert!(reg.list_developers().unwrap().is_empty());
}

pub fn developer_names_and_passwords_are_checked(reg: &dyn Backend) {
    let rev = reg.revision().unwrap();
    reg.create_developer("alice", PW).unwrap();
    assert!(reg.revision().unwrap() > rev, "a change bumps the revision");
    let taken = reg.create_developer("alice", "a different password");
    assert!(
        matches!(&taken, Err(RegistryError::Taken { name, .. }) if name == "alice"),
        "{taken:?}"
    );
    let short = reg.create_developer("bob", "elevenchars");
    assert!(
        matches!(&short, Err(RegistryError::Invalid(m)) if m.contains("12")),
        "{short:?}"
    );
    for bad in [
        "",
        " bob",
        "bob ",
        "bo\tb",
        &"b".repeat(MAX_DEVELOPER_NAME + 1),
    ] {
        assert!(
            matches!(
                reg.create_developer(bad, PW),
                Err(RegistryError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        reg.create_developer("bob", &"x".repeat(MAX_PASSWORD_BYTES + 1)),
        Err(RegistryError::Invalid(_))
    ));
    // The longest name and password allowed, and a name with spaces inside.
    let long = "é".repeat(MAX_DEVELOPER_NAME);
    reg.create_developer(&long, &"x".repeat(MAX_PASSWORD_BYTES))
        .unwrap();
    reg.create_developer("bob the builder", "twelve chars")
        .unwrap();
    let names: Vec<String> = reg
        .list_developers()
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(
        names,
        vec!["alice".to_string(), long, "bob the builder".into()]
    );
}

pub fn developers_see_only_their_own_applications(reg: &dyn Backend) {
    let a = reg.create_developer("dev-a", PW).unwrap();
    let b = reg.create_developer("dev-b", PW).unwrap();
    let (app1, _) = reg.create_application("app-one", 0, 1).unwrap();
    let (app2, _) = reg.create_application("app-two", 0, 1).unwrap();
    let (app3, _) = reg.create_application("app-three", 0, 1).unwrap();
    reg.own_application(a.id, app1.id).unwrap();
    reg.own_application(b.id, app2.id).unwrap();

    assert_eq!(
        reg.applications_of_developer(a.id).unwrap(),
        vec![app1.clone()]
    );
    assert_eq!(
        reg.applications_of_developer(b.id).unwrap(),
        vec![app2.clone()]
    );
    assert!(reg.developer_owns(a.id, app1.id).unwrap());
    assert!(!reg.developer_owns(a.id, app2.id).unwrap());
    assert!(!reg.developer_owns(b.id, app1.id).unwrap());
    assert!(!reg.developer_owns(a.id, app3.id).unwrap());

    // Idempotent; several applications come by id; several owners.
    reg.own_application(a.id, app1.id).unwrap();
    reg.own_application(a.id, app3.id).unwrap();
    reg.own_application(b.id, app3.id).unwrap();
    assert_eq!(
        reg.applications_of_developer(a.id).unwrap(),
        vec![app1.clone(), app3.clone()]
    );
    assert_eq!(
        reg.applications_of_developer(b.id).unwrap(),
        vec![app2.clone(), app3.clone()]
    );

    // Unknown developer or application.
    assert!(matches!(
        reg.own_application(a.id, app3.id + 1_000),
        Err(RegistryError::NotFound {
            what: "application",
            ..
        })
    ));
    assert!(matches!(
        reg.own_application(b.id + 1_000, app1.id),
        Err(RegistryError::NotFound {
            what: "developer",
            ..
        })
    ));
    assert!(reg
        .applications_of_developer(b.id + 1_000)
        .unwrap()
        .is_empty());

    assert!(reg.disown_application(a.id, app3.id).unwrap());
    assert!(!reg.disown_application(a.id, app3.id).unwrap());
    assert_eq!(
        reg.applications_of_developer(a.id).unwrap(),
        vec![app1.clone()]
    );
    assert!(reg.developer_owns(b.id, app3.id).unwrap(), "b's stays");

    // Deleting an application ends its ownerships; deleting a developer
    // ends theirs and nobody else's.
    assert!(reg.delete_application(app3.id).unwrap());
    assert_eq!(
        reg.applications_of_developer(b.id).unwrap(),
        vec![app2.clone()]
    );
    assert!(!reg.developer_owns(b.id, app3.id).unwrap());
    assert!(reg.delete_developer("dev-a").unwrap());
    assert!(!reg.developer_owns(a.id, app1.id).unwrap());
    assert!(reg.applications_of_developer(a.id).unwrap().is_empty());
    assert!(reg.application(app1.id).unwrap().is_some(), "the app stays");
    assert_eq!(reg.applications_of_developer(b.id).unwrap(), vec![app2]);
    // A new developer of the old name owns nothing of the old one's.
    let a2 = reg.create_developer("dev-a", PW).unwrap();
    assert_ne!(a2.id, a.id);
    assert!(reg.applications_of_developer(a2.id).unwrap().is_empty());
}

pub fn intent_requests_pending_until_approved_or_denied(reg: &dyn Backend) {
    use intents::{GUILD_MEMBERS, GUILD_PRESENCES, MESSAGE_CONTENT};
    let (app, _) = reg.create_application("asker", MESSAGE_CONTENT, 1).unwrap();
    let (other, _) = reg.create_application("quiet", 0, 1).unwrap();
    assert_eq!(app.requested_intents, 0);
    assert!(reg.intent_requests().unwrap().is_empty());

    // Already approved: nothing pending.
    let a = reg.request_intents(app.id, MESSAGE_CONTENT).unwrap();
    assert_eq!(a.requested_intents, MESSAGE_CONTENT);
    assert!(reg.intent_requests().unwrap().is_empty());

    let rev = reg.revision().unwrap();
    let a = reg
        .request_intents(app.id, MESSAGE_CONTENT | GUILD_MEMBERS)
        .unwrap();
    assert!(reg.revision().unwrap() > rev);
    assert_eq!(a.requested_intents, MESSAGE_CONTENT | GUILD_MEMBERS);
    assert_eq!(
        a.approved_intents, MESSAGE_CONTENT,
        "a request approves nothing"
    );
    assert_eq!(reg.application(app.id).unwrap(), Some(a.clone()));
    assert_eq!(reg.intent_requests().unwrap(), vec![a.clone()]);

    // A request replaces the last one.
    let a = reg.request_intents(app.id, GUILD_PRESENCES).unwrap();
    assert_eq!(a.requested_intents, GUILD_PRESENCES);
    // Refused as set_approved_intents refuses: non-privileged bits.
    let refused = reg.request_intents(app.id, GUILD_PRESENCES | 1);
    assert!(
        matches!(&refused, Err(RegistryError::Invalid(m)) if m.contains("non-privileged")),
        "{refused:?}"
    );
    assert!(matches!(
        reg.set_approved_intents(app.id, 1),
        Err(RegistryError::Invalid(_))
    ));
    assert!(matches!(
        reg.request_intents(other.id + 1_000, GUILD_MEMBERS),
        Err(RegistryError::NotFound { .. })
    ));
    assert_eq!(
        reg.application(app.id).unwrap().unwrap().requested_intents,
        GUILD_PRESENCES
    );

    reg.request_intents(other.id, GUILD_MEMBERS).unwrap();
    let pending: Vec<u64> = reg
        .intent_requests()
        .unwrap()
        .iter()
        .map(|a| a.id)
        .collect();
    let mut want = vec![app.id, other.id];
    want.sort_unstable();
    assert_eq!(pending, want, "by id");

    // Approve: approved | requested, which writes an IntentsChanged.
    let last = reg.last_revocation_id().unwrap();
    let a = reg
        .set_approved_intents(app.id, a.approved_intents | a.requested_intents)
        .unwrap();
    assert_eq!(a.approved_intents, MESSAGE_CONTENT | GUILD_PRESENCES);
    assert_eq!(
        a.flags & app_flags::GATEWAY_MASK,
        app_flags::GATEWAY_MESSAGE_CONTENT | app_flags::GATEWAY_PRESENCE
    );
    assert_eq!(a.requested_intents, GUILD_PRESENCES, "the request is kept");
    let revoked = reg.revocations_since(last, 10).unwrap();
    assert_eq!(
        revoked.iter().map(|r| r.revocation).collect::<Vec<_>>(),
        vec![Revocation::IntentsChanged {
            application_id: app.id
        }]
    );
    let pending: Vec<u64> = reg
        .intent_requests()
        .unwrap()
        .iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(pending, vec![other.id], "approval clears what was pending");

    // Deny: the request becomes what is approved already.
    let o = reg.application(other.id).unwrap().unwrap();
    let o = reg
        .request_intents(other.id, o.requested_intents & o.approved_intents)
        .unwrap();
    assert_eq!((o.requested_intents, o.approved_intents), (0, 0));
    assert!(reg.intent_requests().unwrap().is_empty());
}
