//! Server state changes carried by the event stream (records flagged
//! GUILD_STATE): parsed into registry changes so later GUILD_CREATEs and
//! permission checks see them.

use registry::{Channel, Overwrite, OverwriteKind, Role, StateChange};
use serde_json::Value;

fn id(v: &Value) -> Option<u64> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
}

fn bits(v: &Value) -> u64 {
    id(v).unwrap_or(0)
}

/// The registry change for one state event, or None for event types that
/// change nothing we keep (or a `d` we cannot read, which is logged).
pub fn parse(t: &str, server_id: u64, d: &[u8]) -> Option<StateChange> {
    let d: Value = serde_json::from_slice(d).ok()?;
    match t {
        "GUILD_UPDATE" => Some(StateChange::ServerName {
            server_id,
            name: d.get("name")?.as_str()?.to_string(),
        }),
        "CHANNEL_CREATE" | "CHANNEL_UPDATE" => {
            let overwrites = d
                .get("permission_overwrites")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|o| {
                            Some(Overwrite {
                                target_id: id(o.get("id")?)?,
                                kind: if o.get("type").and_then(Value::as_u64) == Some(1) {
                                    OverwriteKind::Member
                                } else {
                                    OverwriteKind::Role
                                },
                                allow: o.get("allow").map(bits).unwrap_or(0),
                                deny: o.get("deny").map(bits).unwrap_or(0),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some(StateChange::UpsertChannel {
                channel: Channel {
                    id: id(d.get("id")?)?,
                    server_id,
                    name: d
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("channel")
                        .to_string(),
                    kind: d.get("type").and_then(Value::as_u64).unwrap_or(0) as u8,
                    position: d.get("position").and_then(Value::as_i64).unwrap_or(0) as i32,
                    parent_id: d.get("parent_id").and_then(id),
                    topic: d.get("topic").and_then(Value::as_str).map(str::to_string),
                },
                overwrites,
            })
        }
        "CHANNEL_DELETE" => Some(StateChange::DeleteChannel {
            channel_id: id(d.get("id")?)?,
        }),
        "GUILD_ROLE_CREATE" | "GUILD_ROLE_UPDATE" => {
            let r = d.get("role")?;
            Some(StateChange::UpsertRole {
                role: Role {
                    id: id(r.get("id")?)?,
                    server_id,
                    name: r
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("role")
                        .to_string(),
                    permissions: r.get("permissions").map(bits).unwrap_or(0),
                    position: r.get("position").and_then(Value::as_i64).unwrap_or(0) as i32,
                    color: r.get("color").and_then(Value::as_u64).unwrap_or(0) as u32,
                    hoist: r.get("hoist").and_then(Value::as_bool).unwrap_or(false),
                    mentionable: r
                        .get("mentionable")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    managed: false,
                },
            })
        }
        "GUILD_ROLE_DELETE" => Some(StateChange::DeleteRole {
            server_id,
            role_id: id(d.get("role_id")?)?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_update_with_overwrites() {
        let d = br#"{"id":"55","type":0,"name":"secret","position":2,"permission_overwrites":[{"id":"7","type":0,"allow":"0","deny":"1024"},{"id":"9","type":1,"allow":"1024","deny":"0"}]}"#;
        match parse("CHANNEL_UPDATE", 7, d).unwrap() {
            StateChange::UpsertChannel {
                channel,
                overwrites,
            } => {
                assert_eq!(
                    (channel.id, channel.server_id, channel.name.as_str()),
                    (55, 7, "secret")
                );
                assert_eq!(overwrites.len(), 2);
                assert_eq!(
                    (overwrites[0].deny, overwrites[1].kind),
                    (1024, OverwriteKind::Member)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn roles_and_deletes() {
        let r = parse(
            "GUILD_ROLE_UPDATE",
            7,
            br#"{"guild_id":"7","role":{"id":"8","name":"x","permissions":"8"}}"#,
        );
        assert!(matches!(r, Some(StateChange::UpsertRole { role }) if role.permissions == 8));
        assert_eq!(
            parse("GUILD_ROLE_DELETE", 7, br#"{"role_id":"8"}"#),
            Some(StateChange::DeleteRole {
                server_id: 7,
                role_id: 8
            })
        );
        assert_eq!(
            parse("CHANNEL_DELETE", 7, br#"{"id":"5"}"#),
            Some(StateChange::DeleteChannel { channel_id: 5 })
        );
        assert_eq!(parse("MESSAGE_CREATE", 7, br#"{}"#), None);
        assert_eq!(parse("CHANNEL_UPDATE", 7, b"not json"), None);
    }
}
