//! One embed's limits, as Discord enforces them: each part's own
//! (characters; `fields`: entries) and what it counts toward the 6,000
//! characters of a message's embeds (`body.rs` adds those up and turns a
//! part over its limit into a 400 50035 naming `embeds.N.<path>`).

use serde_json::{Map, Value};

pub const TITLE_CHARS: usize = 256;
pub const DESCRIPTION_CHARS: usize = 4_096;
pub const FIELDS: usize = 25;
pub const FIELD_NAME_CHARS: usize = 256;
pub const FIELD_VALUE_CHARS: usize = 1_024;
pub const FOOTER_CHARS: usize = 2_048;
pub const AUTHOR_NAME_CHARS: usize = 256;

/// The first part of an embed over its limit: its path inside the embed
/// (`title`, `fields.3.value`) and the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLong {
    pub path: String,
    pub max: usize,
}

/// Checks one embed's parts; the characters it counts toward the 6,000.
/// Characters are Unicode scalar values, as Discord counts them.
pub fn check(o: &Map<String, Value>) -> Result<usize, TooLong> {
    let chars = |v: Option<&Value>| v.and_then(Value::as_str).map_or(0, |s| s.chars().count());
    let over = |path: &str, max| TooLong {
        path: path.to_owned(),
        max,
    };
    let mut total = 0;
    let texts = [
        ("title", o.get("title"), TITLE_CHARS),
        ("description", o.get("description"), DESCRIPTION_CHARS),
        (
            "footer.text",
            o.get("footer").and_then(|f| f.get("text")),
            FOOTER_CHARS,
        ),
        (
            "author.name",
            o.get("author").and_then(|a| a.get("name")),
            AUTHOR_NAME_CHARS,
        ),
    ];
    for (at, v, max) in texts {
        let n = chars(v);
        if n > max {
            return Err(over(at, max));
        }
        total += n;
    }
    if let Some(Value::Array(fields)) = o.get("fields") {
        if fields.len() > FIELDS {
            return Err(over("fields", FIELDS));
        }
        for (j, f) in fields.iter().enumerate() {
            for (at, max) in [("name", FIELD_NAME_CHARS), ("value", FIELD_VALUE_CHARS)] {
                let n = chars(f.get(at));
                if n > max {
                    return Err(over(&format!("fields.{j}.{at}"), max));
                }
                total += n;
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(v: Value) -> Result<usize, TooLong> {
        check(v.as_object().unwrap())
    }

    #[test]
    fn each_part_has_discord_s_limit_by_its_path() {
        let x = |n: usize| "x".repeat(n);
        let field = |name: usize, value: usize| json!({"name": x(name), "value": x(value)});
        // At each limit: accepted.
        for ok in [
            json!({"title": x(256)}),
            json!({"description": x(4096)}),
            json!({"fields": vec![field(1, 1); 25]}),
            json!({"fields": [field(256, 1024)]}),
            json!({"footer": {"text": x(2048)}}),
            json!({"author": {"name": x(256)}}),
        ] {
            of(ok.clone()).unwrap_or_else(|e| panic!("{ok:.80}: {e:?}"));
        }
        let cases = [
            (json!({"title": x(257)}), "title", 256),
            (json!({"description": x(4097)}), "description", 4096),
            (json!({"fields": vec![field(1, 1); 26]}), "fields", 25),
            (
                json!({"fields": [field(1, 1), field(257, 1)]}),
                "fields.1.name",
                256,
            ),
            (json!({"fields": [field(1, 1025)]}), "fields.0.value", 1024),
            (json!({"footer": {"text": x(2049)}}), "footer.text", 2048),
            (json!({"author": {"name": x(257)}}), "author.name", 256),
        ];
        for (embed, path, max) in cases {
            assert_eq!(
                of(embed).unwrap_err(),
                TooLong {
                    path: path.into(),
                    max
                }
            );
        }
        // Multi-byte characters count once each.
        assert_eq!(of(json!({"title": "é".repeat(256)})), Ok(256));
        // What counts toward the 6,000.
        let e = json!({"title": "ab", "description": "cde", "footer": {"text": "f"},
                       "author": {"name": "gh"}, "fields": [{"name": "i", "value": "jk"}],
                       "url": "not counted"});
        assert_eq!(of(e), Ok(11));
    }
}
