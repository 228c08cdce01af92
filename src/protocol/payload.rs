//! JSON the server sends, rendered into WebSocket text frames.
//!
//! Control payloads are tiny and rendered with `write!`; READY (`ready_d`),
//! GUILD_CREATE (`guild::guild_create`, by the registry link) and
//! GUILD_MEMBERS_CHUNK (`members_chunk_d`) once per identify or request, with
//! serde_json. Dispatch frames are assembled from a prefix and the event's
//! pre-serialised `d`, so the payload is never re-encoded per session.

use std::io::Write;

use net::ws::{self, OpCode};

/// Append one unfragmented text frame holding `payload`.
pub fn frame(out: &mut Vec<u8>, payload: &[u8]) {
    ws::encode_frame(OpCode::Text, payload, out);
}

pub fn hello(out: &mut Vec<u8>, heartbeat_interval_ms: u64) {
    let mut p = [0u8; 96];
    let n = {
        let mut w = &mut p[..];
        let _ = write!(
            w,
            r#"{{"op":10,"d":{{"heartbeat_interval":{heartbeat_interval_ms},"_trace":["gatewayd"]}},"s":null,"t":null}}"#
        );
        96 - w.len()
    };
    frame(out, &p[..n]);
}

pub fn heartbeat_ack(out: &mut Vec<u8>) {
    frame(out, br#"{"op":11,"d":null,"s":null,"t":null}"#);
}

/// Op 1 from the server: asks the client to heartbeat now.
pub fn heartbeat_request(out: &mut Vec<u8>) {
    frame(out, br#"{"op":1,"d":null,"s":null,"t":null}"#);
}

pub fn reconnect(out: &mut Vec<u8>) {
    frame(out, br#"{"op":7,"d":null,"s":null,"t":null}"#);
}

pub fn invalid_session(out: &mut Vec<u8>, resumable: bool) {
    if resumable {
        frame(out, br#"{"op":9,"d":true,"s":null,"t":null}"#);
    } else {
        frame(out, br#"{"op":9,"d":false,"s":null,"t":null}"#);
    }
}

/// ISO 8601 UTC timestamp (`2026-11-30T08:38:50.123000+00:00`) from Unix ms,
/// the form Discord uses in `timestamp` and `joined_at`.
pub fn iso8601(unix_ms: u64) -> String {
    Iso8601(unix_ms).to_string()
}

/// A Unix time in ms as the platform writes timestamps
/// (`2026-12-05T23:17:10.281000+00:00`), formatted where it is written
/// (`write!`): no `String` of its own.
#[derive(Clone, Copy, Debug)]
pub struct Iso8601(pub u64);

impl std::fmt::Display for Iso8601 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (secs, ms) = (self.0 / 1000, self.0 % 1000);
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}000+00:00",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60
        )
    }
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// What READY says, besides the guilds (each listed as unavailable until
/// its GUILD_CREATE follows).
pub struct Ready<'a> {
    /// The bot user object, as JSON.
    pub user_json: &'a str,
    pub session_id: &'a str,
    pub resume_gateway_url: &'a str,
    pub shard: (u32, u32),
    pub application_id: proto::AppId,
    pub application_flags: u64,
}

/// READY's `d`, with every field the real libraries read.
pub fn ready_d(r: &Ready<'_>, guilds: impl Iterator<Item = proto::ServerId>) -> Vec<u8> {
    let d = serde_json::json!({
        "v": 10,
        "user": serde_json::from_str::<serde_json::Value>(r.user_json).unwrap_or_default(),
        "guilds": guilds.map(|g| serde_json::json!({"id": g.to_string(), "unavailable": true})).collect::<Vec<_>>(),
        "session_id": r.session_id,
        "session_type": "normal",
        "resume_gateway_url": r.resume_gateway_url,
        "shard": [r.shard.0, r.shard.1],
        "application": {"id": r.application_id.to_string(), "flags": r.application_flags},
        "private_channels": [],
        "relationships": [],
        "presences": [],
        "guild_join_requests": [],
        "geo_ordered_rtc_regions": [],
        "user_settings": {},
        "auth": {},
        "_trace": ["gatewayd"],
    });
    serde_json::to_vec(&d).expect("json")
}

/// GUILD_MEMBERS_CHUNK's `d` for a Request Guild Members (op 8): the one
/// member a bot can see of a server here, itself (`user_json` is its own
/// whole user object; a member's `user` is the partial one).
pub fn members_chunk_d(guild_id: proto::ServerId, user_json: &str, nonce: Option<&str>) -> Vec<u8> {
    let own = serde_json::from_str::<serde_json::Value>(user_json).unwrap_or_default();
    let d = serde_json::json!({
        "guild_id": guild_id.to_string(),
        "members": [{"user": crate::protocol::user::public_user(&own),
                     "roles": [], "joined_at": iso8601(0), "deaf": false, "mute": false, "flags": 0, "pending": false}],
        "chunk_index": 0,
        "chunk_count": 1,
        "not_found": [],
        "nonce": nonce,
    });
    serde_json::to_vec(&d).expect("json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload_of(frame: &[u8]) -> &[u8] {
        let len = frame[1] & 0x7f;
        match len {
            126 => &frame[4..],
            127 => &frame[10..],
            _ => &frame[2..],
        }
    }

    #[test]
    fn hello_carries_interval() {
        let mut out = Vec::new();
        hello(&mut out, 41250);
        let v: serde_json::Value = serde_json::from_slice(payload_of(&out)).unwrap();
        assert_eq!(v["op"], 10);
        assert_eq!(v["d"]["heartbeat_interval"], 41250);
    }

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000000+00:00");
        assert_eq!(
            iso8601(1_796_027_930_123),
            "2026-11-30T08:38:50.123000+00:00"
        );
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000000+00:00");
    }

    #[test]
    fn ready_and_members_chunk_carry_what_libraries_read() {
        let r = Ready {
            user_json: r#"{"id":"7","username":"bot"}"#,
            session_id: "abc",
            resume_gateway_url: "ws://127.0.0.1:8080",
            shard: (1, 4),
            application_id: proto::AppId(42),
            application_flags: 8,
        };
        let d: serde_json::Value = serde_json::from_slice(&ready_d(
            &r,
            [proto::ServerId(5), proto::ServerId(6)].into_iter(),
        ))
        .unwrap();
        assert_eq!(d["v"], 10);
        assert_eq!(d["user"]["id"], "7");
        assert_eq!(d["session_id"], "abc");
        assert_eq!(d["resume_gateway_url"], "ws://127.0.0.1:8080");
        assert_eq!(d["shard"], serde_json::json!([1, 4]));
        assert_eq!(
            d["application"],
            serde_json::json!({"id": "42", "flags": 8})
        );
        assert_eq!(
            d["guilds"],
            serde_json::json!([{"id": "5", "unavailable": true}, {"id": "6", "unavailable": true}])
        );
        let c: serde_json::Value = serde_json::from_slice(&members_chunk_d(
            proto::ServerId(5),
            r.user_json,
            Some("n1"),
        ))
        .unwrap();
        assert_eq!(c["guild_id"], "5");
        assert_eq!(c["members"][0]["user"]["username"], "bot");
        assert_eq!(c["nonce"], "n1");
        assert_eq!(
            (c["chunk_index"].clone(), c["chunk_count"].clone()),
            (0.into(), 1.into())
        );
    }
}
