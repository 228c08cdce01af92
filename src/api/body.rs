//! Request bodies of the REST edge: JSON (or multipart/form-data with a
//! `payload_json` part, as discord.py and discord.js send when a file is
//! attached), validated as the platform does: every failure is a 400 code
//! 50035 with an `errors` tree naming the field, unknown fields are
//! ignored. No file storage: a file part or an `attachments` entry is a
//! 400 naming it.

use serde_json::{json, Map, Value};

/// Largest request body the edge reads (413 code 40005 beyond).
pub const MAX_BODY: usize = 64 * 1024;
pub const MAX_CONTENT_CHARS: usize = 2_000;
/// Action rows a message holds, at most.
pub const MAX_ACTION_ROWS: usize = 5;
pub const MAX_EMBEDS: usize = 10;
pub const MAX_EMBED_CHARS: usize = 6_000;
pub const MAX_BULK_DELETE: usize = 100;

/// An error the edge answers with: status and the JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub body: Value,
}

impl ApiError {
    pub fn new(status: u16, code: u32, message: &str) -> ApiError {
        ApiError {
            status,
            body: json!({ "message": message, "code": code }),
        }
    }

    /// 400 code 50035, `errors` naming `path` (dotted; array indices as
    /// numbers) with one `_errors` entry.
    pub fn form(path: &str, code: &str, message: &str) -> ApiError {
        let mut tree = json!({ "_errors": [{ "code": code, "message": message }] });
        for part in path.rsplit('.') {
            let mut m = Map::new();
            m.insert(part.to_string(), tree);
            tree = Value::Object(m);
        }
        ApiError {
            status: 400,
            body: json!({ "code": 50035, "message": "Invalid Form Body", "errors": tree }),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.body).expect("json")
    }
}

pub mod codes {
    pub const UNKNOWN_CHANNEL: u32 = 10003;
    pub const UNKNOWN_GUILD: u32 = 10004;
    pub const UNKNOWN_MEMBER: u32 = 10007;
    pub const UNKNOWN_MESSAGE: u32 = 10008;
    pub const UNKNOWN_ROLE: u32 = 10011;
    pub const UNKNOWN_USER: u32 = 10013;
    pub const UNKNOWN_EMOJI: u32 = 10014;
    pub const UNKNOWN_BAN: u32 = 10026;
    pub const REQUEST_TOO_LARGE: u32 = 40005;
    pub const MISSING_ACCESS: u32 = 50001;
    pub const CANNOT_EDIT_OTHERS: u32 = 50005;
    pub const EMPTY_MESSAGE: u32 = 50006;
    pub const MISSING_PERMISSIONS: u32 = 50013;
    pub const BULK_DELETE_TOO_OLD: u32 = 50034;
    pub const INVALID_FORM_BODY: u32 = 50035;
}

/// The JSON object a request carries, from a JSON or multipart body.
pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let ct = content_type.unwrap_or("");
    let main = ct.split(';').next().unwrap_or("").trim();
    let json_bytes: std::borrow::Cow<[u8]> = if main.eq_ignore_ascii_case("multipart/form-data") {
        let boundary = ct
            .split(';')
            .skip(1)
            .filter_map(|p| p.trim().split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("boundary"))
            .map(|(_, v)| v.trim().trim_matches('"'))
            .filter(|b| !b.is_empty() && b.len() <= 70)
            .ok_or_else(|| {
                ApiError::form("payload_json", "MULTIPART_INVALID", "missing boundary")
            })?;
        multipart_payload_json(body, boundary)?.into()
    } else if main.eq_ignore_ascii_case("application/json") || (main.is_empty() && body.is_empty())
    {
        body.into()
    } else {
        return Err(ApiError::form(
            "_body",
            "CONTENT_TYPE_INVALID",
            "Expected Content-Type application/json or multipart/form-data",
        ));
    };
    if json_bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(&json_bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::form(
            "_body",
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType",
        )),
        Err(_) => Err(ApiError::new(
            400,
            codes::INVALID_FORM_BODY,
            "The request body contains invalid JSON.",
        )),
    }
}

/// The `payload_json` part of a multipart body; a file part is refused by
/// name (`files[0]`), as the node stores no files.
fn multipart_payload_json(body: &[u8], boundary: &str) -> Result<Vec<u8>, ApiError> {
    let delim = format!("--{boundary}");
    let mut payload = None;
    let mut rest = body;
    let bad = || {
        ApiError::form(
            "payload_json",
            "MULTIPART_INVALID",
            "malformed multipart body",
        )
    };
    let start = find(rest, delim.as_bytes()).ok_or_else(bad)?;
    rest = &rest[start + delim.len()..];
    let mut parts = 0;
    loop {
        if rest.starts_with(b"--") {
            break;
        }
        parts += 1;
        if parts > 16 {
            return Err(bad());
        }
        let rest2 = rest.strip_prefix(b"\r\n").ok_or_else(bad)?;
        let head_end = find(rest2, b"\r\n\r\n").ok_or_else(bad)?;
        let head = std::str::from_utf8(&rest2[..head_end]).map_err(|_| bad())?;
        let data_start = head_end + 4;
        let end_delim = format!("\r\n{delim}");
        let data_len = find(&rest2[data_start..], end_delim.as_bytes()).ok_or_else(bad)?;
        let data = &rest2[data_start..data_start + data_len];
        let name = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))
            .and_then(|l| {
                l.split(';').find_map(|p| {
                    let p = p.trim();
                    p.strip_prefix("name=")
                        .map(|v| v.trim_matches('"').to_string())
                })
            })
            .ok_or_else(bad)?;
        if name == "payload_json" {
            payload = Some(data.to_vec());
        } else if name.starts_with("files[") || name == "file" || head.contains("filename=") {
            return Err(ApiError::form(
                &name,
                "ATTACHMENTS_UNSUPPORTED",
                "This node stores no files: send the message without attachments",
            ));
        }
        rest = &rest2[data_start + data_len + end_delim.len()..];
    }
    payload.ok_or_else(|| {
        ApiError::form(
            "payload_json",
            "BASE_TYPE_REQUIRED",
            "This field is required",
        )
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A message to create or the fields of an edit, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageDraft {
    pub content: Option<String>,
    pub embeds: Option<Vec<Value>>,
    pub allowed_mentions: Option<Value>,
    /// (message id, channel id if given) of the message replied to.
    pub reference: Option<(u64, Option<u64>)>,
    pub fail_if_not_exists: bool,
    pub nonce: Option<Value>,
    pub flags: u64,
    /// Action rows (at most 5) of buttons and select menus, as sent.
    pub components: Option<Vec<Value>>,
    /// Set by the chat service (never from a body) for a message that
    /// answers an interaction: `(interaction_metadata, application id)`.
    pub interaction: Option<(Value, u64)>,
    /// Set by the chat service (never from a body): the id reserved for
    /// this message (an interaction's first answer, whose settle recorded
    /// it); None: the next id when it is committed.
    pub id: Option<u64>,
}

/// Validate a create (`create`: content or embeds required) or an edit.
pub fn message(m: &Map<String, Value>, create: bool) -> Result<MessageDraft, ApiError> {
    let mut d = MessageDraft::default();
    match m.get("content") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            if s.chars().count() > MAX_CONTENT_CHARS {
                return Err(ApiError::form(
                    "content",
                    "BASE_TYPE_MAX_LENGTH",
                    "Must be 2000 or fewer in length.",
                ));
            }
            d.content = Some(s.clone());
        }
        Some(_) => {
            return Err(ApiError::form(
                "content",
                "BASE_TYPE_STRING",
                "Could not interpret value as string.",
            ))
        }
    }
    let embeds: Option<Vec<Value>> = match (m.get("embeds"), m.get("embed")) {
        (Some(Value::Array(a)), _) => Some(a.clone()),
        (Some(Value::Null) | None, Some(e @ Value::Object(_))) => Some(vec![e.clone()]),
        (Some(Value::Null) | None, _) => None,
        (Some(_), _) => {
            return Err(ApiError::form(
                "embeds",
                "BASE_TYPE_LIST",
                "Must be an array.",
            ))
        }
    };
    if let Some(e) = &embeds {
        if e.len() > MAX_EMBEDS {
            return Err(ApiError::form(
                "embeds",
                "BASE_TYPE_MAX_LENGTH",
                "Must be 10 or fewer in length.",
            ));
        }
        let mut total = 0;
        for (i, em) in e.iter().enumerate() {
            let Value::Object(o) = em else {
                return Err(ApiError::form(
                    &format!("embeds.{i}"),
                    "MODEL_TYPE_CONVERT",
                    "Only dictionaries may be used in a ModelType",
                ));
            };
            total += super::embed::check(o).map_err(|e| {
                ApiError::form(
                    &format!("embeds.{i}.{}", e.path),
                    "BASE_TYPE_MAX_LENGTH",
                    &format!("Must be {} or fewer in length.", e.max),
                )
            })?;
        }
        if total > MAX_EMBED_CHARS {
            return Err(ApiError::form(
                "embeds",
                "MAX_EMBED_SIZE_EXCEEDED",
                "Embed size exceeds maximum size of 6000",
            ));
        }
        d.embeds = embeds;
    }
    if let Some(Value::Array(a)) = m.get("attachments") {
        if !a.is_empty() {
            return Err(ApiError::form(
                "attachments.0",
                "ATTACHMENTS_UNSUPPORTED",
                "This node stores no files: send the message without attachments",
            ));
        }
    }
    if matches!(m.get("tts"), Some(Value::Bool(true))) {
        return Err(ApiError::form(
            "tts",
            "TTS_UNSUPPORTED",
            "Text-to-speech messages are not supported on this node",
        ));
    }
    match m.get("allowed_mentions") {
        None | Some(Value::Null) => {}
        Some(v @ Value::Object(_)) => d.allowed_mentions = Some(v.clone()),
        Some(_) => {
            return Err(ApiError::form(
                "allowed_mentions",
                "MODEL_TYPE_CONVERT",
                "Only dictionaries may be used in a ModelType",
            ))
        }
    }
    match m.get("message_reference") {
        None | Some(Value::Null) => {}
        Some(Value::Object(r)) => {
            let mid = r.get("message_id").and_then(snowflake).ok_or_else(|| {
                ApiError::form(
                    "message_reference.message_id",
                    "NUMBER_TYPE_COERCE",
                    "Value is not snowflake.",
                )
            })?;
            let cid = r.get("channel_id").and_then(snowflake);
            d.reference = Some((mid, cid));
            d.fail_if_not_exists = !matches!(r.get("fail_if_not_exists"), Some(Value::Bool(false)));
        }
        Some(_) => {
            return Err(ApiError::form(
                "message_reference",
                "MODEL_TYPE_CONVERT",
                "Only dictionaries may be used in a ModelType",
            ))
        }
    }
    match m.get("nonce") {
        None | Some(Value::Null) => {}
        Some(v @ (Value::String(_) | Value::Number(_))) => {
            if v.as_str().is_some_and(|s| s.len() > 25) {
                return Err(ApiError::form(
                    "nonce",
                    "BASE_TYPE_MAX_LENGTH",
                    "Must be 25 or fewer in length.",
                ));
            }
            d.nonce = Some(v.clone());
        }
        Some(_) => {
            return Err(ApiError::form(
                "nonce",
                "BASE_TYPE_STRING",
                "Could not interpret value as string.",
            ))
        }
    }
    d.flags = m.get("flags").and_then(Value::as_u64).unwrap_or(0);
    match m.get("components") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.len() <= MAX_ACTION_ROWS => {
            for (i, row) in a.iter().enumerate() {
                let ok = row.get("type").and_then(Value::as_u64) == Some(1)
                    && row
                        .get("components")
                        .and_then(Value::as_array)
                        .is_some_and(|c| !c.is_empty() && c.len() <= 5);
                if !ok {
                    return Err(ApiError::form(
                        &format!("components.{i}"),
                        "COMPONENT_LAYOUT_WIDTH_EXCEEDED",
                        "An action row (type 1) holds 1 to 5 components",
                    ));
                }
            }
            let mut rows = a.clone();
            number_components(&mut rows);
            d.components = Some(rows);
        }
        Some(_) => {
            return Err(ApiError::form(
                "components",
                "BASE_TYPE_MAX_LENGTH",
                "Must be an array of 5 or fewer in length.",
            ))
        }
    }
    let empty = d.content.as_deref().is_none_or(str::is_empty)
        && d.embeds.as_ref().is_none_or(Vec::is_empty)
        && d.components.as_ref().is_none_or(Vec::is_empty);
    if create && empty {
        return Err(ApiError::new(
            400,
            codes::EMPTY_MESSAGE,
            "Cannot send an empty message",
        ));
    }
    Ok(d)
}

/// Every component's `id`, as Discord gives them: one given is kept, each
/// other gets the next number from 1 not given elsewhere in the message,
/// in order (a row, then its children). hikari reads `id` of every row and
/// button (`KeyError: 'id'` without it, and the whole event dropped).
fn number_components(rows: &mut [Value]) {
    fn each(v: &mut [Value], f: &mut impl FnMut(&mut Map<String, Value>)) {
        for c in v.iter_mut() {
            if let Value::Object(o) = c {
                f(o);
                if let Some(Value::Array(kids)) = o.get_mut("components") {
                    each(kids, f);
                }
            }
        }
    }
    let mut given = std::collections::BTreeSet::new();
    each(rows, &mut |o| {
        if let Some(id) = o.get("id").and_then(Value::as_u64) {
            given.insert(id);
        }
    });
    let mut next = 0u64;
    each(rows, &mut |o| {
        if o.get("id").and_then(Value::as_u64).is_none() {
            next += 1;
            while given.contains(&next) {
                next += 1;
            }
            o.insert("id".into(), next.into());
        }
    });
}

/// A snowflake as JSON: a decimal string (or a number, which some clients send).
pub fn snowflake(v: &Value) -> Option<u64> {
    match v {
        Value::String(s)
            if !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()) =>
        {
            s.parse().ok()
        }
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// `{"messages": [2..=100 snowflakes]}`.
pub fn bulk_delete(m: &Map<String, Value>) -> Result<Vec<u64>, ApiError> {
    let Some(Value::Array(a)) = m.get("messages") else {
        return Err(ApiError::form(
            "messages",
            "BASE_TYPE_REQUIRED",
            "This field is required",
        ));
    };
    if a.len() < 2 || a.len() > MAX_BULK_DELETE {
        return Err(ApiError::form(
            "messages",
            "BASE_TYPE_BAD_LENGTH",
            "Must be between 2 and 100 in length.",
        ));
    }
    let mut ids = Vec::with_capacity(a.len());
    for (i, v) in a.iter().enumerate() {
        ids.push(snowflake(v).ok_or_else(|| {
            ApiError::form(
                &format!("messages.{i}"),
                "NUMBER_TYPE_COERCE",
                "Value is not snowflake.",
            )
        })?);
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// `{"recipient_id": snowflake}`.
pub fn create_dm(m: &Map<String, Value>) -> Result<u64, ApiError> {
    m.get("recipient_id").and_then(snowflake).ok_or_else(|| {
        ApiError::form(
            "recipient_id",
            "NUMBER_TYPE_COERCE",
            "Value is not snowflake.",
        )
    })
}

/// `PUT /guilds/{id}/bans/{id}`: `delete_message_seconds` 0..=604800 (the
/// node keeps no history to delete beyond its window: checked, then
/// accepted); the deprecated `delete_message_days` 0..=7 likewise.
pub fn ban(m: &Map<String, Value>) -> Result<(), ApiError> {
    for (field, max) in [
        ("delete_message_seconds", 604_800),
        ("delete_message_days", 7),
    ] {
        match m.get(field) {
            None | Some(Value::Null) => {}
            Some(v) if v.as_u64().is_some_and(|n| n <= max) => {}
            Some(_) => {
                return Err(ApiError::form(
                    field,
                    "NUMBER_TYPE_MAX",
                    &format!("int value should be between 0 and {max}."),
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ban_bodies() {
        assert!(ban(&obj(json!({}))).is_ok());
        assert!(ban(&obj(json!({"delete_message_seconds": 604800}))).is_ok());
        let e = ban(&obj(json!({"delete_message_seconds": 604801}))).unwrap_err();
        assert_eq!(
            e.body["errors"]["delete_message_seconds"]["_errors"][0]["code"],
            "NUMBER_TYPE_MAX"
        );
        assert!(ban(&obj(json!({"delete_message_days": "x"}))).is_err());
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn components_are_numbered_as_discord_numbers_them() {
        let button =
            |label: &str| json!({"type": 2, "style": 1, "label": label, "custom_id": label});
        let rows = json!([
            {"type": 1, "components": [button("a"), button("b")]},
            {"type": 1, "components": [{"id": 2, "type": 2, "style": 1, "label": "c", "custom_id": "c"}]},
        ]);
        let d = message(&obj(json!({"components": rows})), true).unwrap();
        let c = d.components.unwrap();
        let ids = |v: &Value| v["id"].as_u64().unwrap();
        assert_eq!(ids(&c[0]), 1);
        assert_eq!(
            (ids(&c[0]["components"][0]), ids(&c[0]["components"][1])),
            (3, 4)
        );
        assert_eq!(
            (ids(&c[1]), ids(&c[1]["components"][0])),
            (5, 2),
            "a given id is kept"
        );
    }

    #[test]
    fn content_and_embeds_limits_with_error_trees() {
        assert!(message(&obj(json!({"content": "a".repeat(2000)})), true).is_ok());
        let e = message(&obj(json!({"content": "é".repeat(2001)})), true).unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(e.body["code"], 50035, "an integer code");
        assert_eq!(
            e.body["errors"]["content"]["_errors"][0]["code"],
            "BASE_TYPE_MAX_LENGTH"
        );
        let e = message(
            &obj(json!({"embeds": vec![json!({"title": "x"}); 11]})),
            true,
        )
        .unwrap_err();
        assert!(e.body["errors"]["embeds"].is_object());
        // Each part within its own limit, 6,144 characters in all.
        let field = json!({"name": "n", "value": "v".repeat(1024)});
        let big = json!({"description": "d".repeat(4096), "fields": [field, field]});
        let e = message(&obj(json!({"embeds": [big]})), true).unwrap_err();
        assert_eq!(
            e.body["errors"]["embeds"]["_errors"][0]["code"],
            "MAX_EMBED_SIZE_EXCEEDED"
        );
        let e = message(&obj(json!({"embeds": [1]})), true).unwrap_err();
        assert!(e.body["errors"]["embeds"]["0"].is_object(), "{}", e.body);
        let e = message(&obj(json!({"content": ""})), true).unwrap_err();
        assert_eq!(e.body["code"], 50006);
        assert!(
            message(&obj(json!({"content": ""})), false).is_ok(),
            "an edit may clear content"
        );
    }

    #[test]
    fn replies_nonces_and_unknown_fields() {
        let d = message(
            &obj(json!({"content": "hi", "message_reference": {"message_id": "123", "fail_if_not_exists": false}, "nonce": "n1", "whatever": [1, 2]})),
            true,
        )
        .unwrap();
        assert_eq!(d.reference, Some((123, None)));
        assert!(!d.fail_if_not_exists);
        assert_eq!(d.nonce, Some(json!("n1")));
        let e = message(
            &obj(json!({"content": "x", "message_reference": {"message_id": "abc"}})),
            true,
        )
        .unwrap_err();
        assert!(e.body["errors"]["message_reference"]["message_id"].is_object());
        let e = message(
            &obj(json!({"content": "x", "attachments": [{"id": 0}]})),
            true,
        )
        .unwrap_err();
        assert!(e.body["errors"]["attachments"]["0"].is_object());
    }

    #[test]
    fn json_and_multipart_bodies() {
        assert_eq!(
            parse(Some("application/json"), br#"{"content":"a"}"#).unwrap()["content"],
            "a"
        );
        assert_eq!(
            parse(Some("application/json; charset=utf-8"), br#"{"a":1}"#).unwrap()["a"],
            1
        );
        let e = parse(Some("application/json"), b"{nope").unwrap_err();
        assert_eq!((e.status, e.body["code"].as_u64()), (400, Some(50035)));
        let e = parse(Some("text/plain"), b"{}").unwrap_err();
        assert_eq!(e.status, 400);
        assert!(parse(Some("application/json"), b"[1]").is_err());
        let mp = b"--xyz\r\nContent-Disposition: form-data; name=\"payload_json\"\r\nContent-Type: application/json\r\n\r\n{\"content\":\"from multipart\"}\r\n--xyz--\r\n";
        let m = parse(Some("multipart/form-data; boundary=xyz"), mp).unwrap();
        assert_eq!(m["content"], "from multipart");
        let mp = b"--b\r\nContent-Disposition: form-data; name=\"payload_json\"\r\n\r\n{\"content\":\"x\"}\r\n--b\r\nContent-Disposition: form-data; name=\"files[0]\"; filename=\"a.png\"\r\n\r\nPNG\r\n--b--\r\n";
        let e = parse(Some("multipart/form-data; boundary=\"b\""), mp).unwrap_err();
        assert!(e.body["errors"]["files[0]"].is_object(), "{}", e.body);
        assert!(parse(Some("multipart/form-data; boundary=b"), b"garbage").is_err());
    }

    #[test]
    fn bulk_delete_and_dm_bodies() {
        assert_eq!(
            bulk_delete(&obj(json!({"messages": ["2", "1", "2"]}))).unwrap(),
            vec![1, 2]
        );
        assert!(bulk_delete(&obj(json!({"messages": ["1"]}))).is_err());
        assert!(bulk_delete(&obj(json!({"messages": ["1", "x"]}))).is_err());
        assert_eq!(create_dm(&obj(json!({"recipient_id": "77"}))).unwrap(), 77);
        assert!(create_dm(&obj(json!({}))).is_err());
    }
}
