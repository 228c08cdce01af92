//! A small, allocation-free JSON tokenizer: strict validation of a record's
//! `d` and the streaming MESSAGE_CONTENT redaction.
//!
//! Nothing here builds a DOM. Values are skipped by a validating scanner
//! whose nesting is tracked in a fixed 128-bit stack (one bit per level:
//! object or array), so arbitrarily nested input costs no heap and no
//! recursion; nesting deeper than [`MAX_DEPTH`] is rejected (serde_json's
//! default limit is the same).

use thiserror::Error;

/// Deepest nesting of objects/arrays accepted in `d` (the top-level object
/// counts as 1).
pub const MAX_DEPTH: u32 = 128;

/// How deep `referenced_message` / `message_snapshots` chains are followed
/// by [`redact_message_content`] before it gives up with
/// [`RedactError::TooDeep`] (Discord nests one level).
pub const MAX_REDACT_NESTING: u32 = 8;

/// Why a JSON text was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum RedactError {
    /// Not valid UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// Valid JSON, but the top-level value is not an object.
    #[error("top-level JSON value is not an object")]
    NotObject,
    /// A JSON syntax error at byte offset `at`.
    #[error("JSON syntax error at byte {at}")]
    Syntax { at: usize },
    /// Nested deeper than [`MAX_DEPTH`] (or message nesting deeper than
    /// [`MAX_REDACT_NESTING`]) at byte offset `at`.
    #[error("JSON nested too deeply at byte {at}")]
    TooDeep { at: usize },
}

type R<T> = Result<T, RedactError>;

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

#[inline]
fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

impl<'a> Cursor<'a> {
    #[inline]
    fn new(b: &'a [u8]) -> Self {
        Cursor { b, i: 0 }
    }

    #[inline]
    fn err(&self) -> RedactError {
        RedactError::Syntax { at: self.i }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if !is_ws(c) {
                break;
            }
            self.i += 1;
        }
    }

    #[inline]
    fn expect(&mut self, c: u8) -> R<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err())
        }
    }

    /// At `"`: skips the whole string (escapes validated; raw control
    /// characters rejected). UTF-8 validity is checked by the callers once for
    /// the whole text.
    fn string(&mut self) -> R<()> {
        self.expect(b'"')?;
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return Err(self.err());
            };
            self.i += 1;
            match c {
                b'"' => return Ok(()),
                b'\\' => {
                    let Some(&e) = self.b.get(self.i) else {
                        return Err(self.err());
                    };
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let unit = self.hex4()?;
                            // Surrogates only in pairs: bots' parsers
                            // (serde_json, for one) refuse a lone one, and
                            // with it the whole dispatch frame.
                            if (0xDC00..0xE000).contains(&unit) {
                                self.i -= 6;
                                return Err(self.err());
                            }
                            if (0xD800..0xDC00).contains(&unit) {
                                if self.b.get(self.i..self.i + 2) != Some(b"\\u") {
                                    return Err(self.err());
                                }
                                self.i += 2;
                                if !(0xDC00..0xE000).contains(&self.hex4()?) {
                                    self.i -= 6;
                                    return Err(self.err());
                                }
                            }
                        }
                        _ => {
                            self.i -= 1;
                            return Err(self.err());
                        }
                    }
                }
                0..=0x1f => {
                    self.i -= 1;
                    return Err(self.err());
                }
                _ => {}
            }
        }
    }

    /// Four hex digits (after `\u`): the UTF-16 code unit.
    fn hex4(&mut self) -> R<u32> {
        let hex = self.b.get(self.i..self.i + 4).ok_or(self.err())?;
        let mut unit = 0;
        for &h in hex {
            unit = unit * 16 + char::from(h).to_digit(16).ok_or(self.err())?;
        }
        self.i += 4;
        Ok(unit)
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, within a
    /// double's range: bots' parsers refuse numbers beyond it (serde_json:
    /// "number out of range"), and with them the whole dispatch frame
    /// (I-JSON, RFC 7493 §2.2, says not to send them).
    fn number(&mut self) -> R<()> {
        let start = self.i;
        self.number_syntax()?;
        let text = &self.b[start..self.i];
        // Only an exponent or 300+ digits can leave a double's range
        // (~1.8e308); parsing (no allocation) is left to those.
        if text.len() >= 300 || text.iter().any(|&c| c == b'e' || c == b'E') {
            let ok = std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<f64>().ok())
                .is_some_and(f64::is_finite);
            if !ok {
                self.i = start;
                return Err(self.err());
            }
        }
        Ok(())
    }

    fn number_syntax(&mut self) -> R<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err()),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err());
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err());
            }
        }
        Ok(())
    }

    fn literal(&mut self, lit: &[u8]) -> R<()> {
        if self.b.get(self.i..self.i + lit.len()) == Some(lit) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(self.err())
        }
    }

    /// `ws "key" ws : ws`, leaving the cursor at the value.
    fn member_key(&mut self) -> R<()> {
        self.ws();
        self.string()?;
        self.ws();
        self.expect(b':')?;
        self.ws();
        Ok(())
    }

    /// Skips one complete value starting at the cursor (no leading
    /// whitespace), validating it. `depth` is the nesting level of the
    /// container holding it (0 at the top level).
    fn value(&mut self, depth: u32) -> R<()> {
        // Bit n of `stack` is set when level n (counted from this call) is
        // an object, clear for an array.
        let mut stack: u128 = 0;
        let mut level: u32 = 0;
        loop {
            // Expecting a value.
            match self.peek() {
                Some(c @ (b'{' | b'[')) => {
                    if depth + level >= MAX_DEPTH {
                        return Err(RedactError::TooDeep { at: self.i });
                    }
                    self.i += 1;
                    self.ws();
                    let close = if c == b'{' { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.i += 1;
                    } else {
                        if c == b'{' {
                            stack |= 1 << level;
                            self.member_key()?;
                        } else {
                            stack &= !(1 << level);
                        }
                        level += 1;
                        continue;
                    }
                }
                Some(b'"') => self.string()?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                _ => return Err(self.err()),
            }
            // A value ended: close containers until one wants another value.
            loop {
                if level == 0 {
                    return Ok(());
                }
                let is_obj = stack & (1 << (level - 1)) != 0;
                self.ws();
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        if is_obj {
                            self.member_key()?;
                        } else {
                            self.ws();
                        }
                        break;
                    }
                    Some(b'}') if is_obj => {
                        self.i += 1;
                        level -= 1;
                    }
                    Some(b']') if !is_obj => {
                        self.i += 1;
                        level -= 1;
                    }
                    _ => return Err(self.err()),
                }
            }
        }
    }
}

/// Strictly validates that `d` is UTF-8 JSON (RFC 8259) whose top-level value
/// is an object, with optional surrounding whitespace; `\u` escapes of
/// UTF-16 surrogates must come in pairs (RFC 8259 §8.2: a lone one is
/// refused by bots' parsers), numbers within a double's range. Allocation-free,
/// linear time, no recursion.
pub fn validate_json_object(d: &[u8]) -> Result<(), RedactError> {
    std::str::from_utf8(d).map_err(|_| RedactError::NotUtf8)?;
    let mut c = Cursor::new(d);
    c.ws();
    if c.peek() != Some(b'{') {
        // Distinguish "valid JSON but not an object" only cheaply: any other
        // start is reported as NotObject when it could begin a value.
        return match c.peek() {
            Some(b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n') => {
                Err(RedactError::NotObject)
            }
            _ => Err(c.err()),
        };
    }
    c.value(0)?;
    c.ws();
    if c.i != d.len() {
        return Err(c.err());
    }
    Ok(())
}

/// Compares a raw JSON string body (between the quotes, escapes undecoded)
/// with an ASCII `target`, decoding escapes, so `"cont\u0065nt"` is
/// recognised as `content`. The body must already be a validated string.
fn key_is(raw: &[u8], target: &[u8]) -> bool {
    if !raw.contains(&b'\\') {
        return raw == target;
    }
    let mut i = 0;
    let mut t = 0;
    while i < raw.len() {
        let c = if raw[i] == b'\\' {
            let e = raw[i + 1];
            i += 2;
            match e {
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'u' => {
                    let mut cp: u32 = 0;
                    for &h in &raw[i..i + 4] {
                        cp = cp * 16 + (h as char).to_digit(16).unwrap_or(0);
                    }
                    i += 4;
                    if cp >= 0x80 {
                        return false; // targets are ASCII
                    }
                    cp as u8
                }
                other => other, // " \ /
            }
        } else {
            i += 1;
            raw[i - 1]
        };
        if target.get(t) != Some(&c) {
            return false;
        }
        t += 1;
    }
    t == target.len()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A message object: redact its content fields.
    Message,
    /// An element of `message_snapshots`: redact its `message`.
    Snapshot,
}

enum Action {
    Keep,
    Replace(&'static [u8]),
    Drop,
    /// Rewrite an object value in this mode (other value kinds kept).
    Object(Mode),
    /// Rewrite each object element of an array value in this mode.
    ArrayOf(Mode),
}

fn classify(key: &[u8], mode: Mode) -> Action {
    match mode {
        Mode::Message => {
            if key_is(key, b"content") {
                Action::Replace(b"\"\"")
            } else if key_is(key, b"embeds")
                || key_is(key, b"attachments")
                || key_is(key, b"components")
            {
                Action::Replace(b"[]")
            } else if key_is(key, b"poll") {
                Action::Drop
            } else if key_is(key, b"referenced_message") {
                Action::Object(Mode::Message)
            } else if key_is(key, b"message_snapshots") {
                Action::ArrayOf(Mode::Snapshot)
            } else {
                Action::Keep
            }
        }
        Mode::Snapshot => {
            if key_is(key, b"message") {
                Action::Object(Mode::Message)
            } else {
                Action::Keep
            }
        }
    }
}

/// At `{`: writes the rewritten object to `out`. `depth` counts JSON
/// nesting (for [`MAX_DEPTH`]), `nesting` counts message rewrites.
fn rewrite_object(
    c: &mut Cursor<'_>,
    out: &mut Vec<u8>,
    mode: Mode,
    depth: u32,
    nesting: u32,
) -> R<()> {
    if nesting >= MAX_REDACT_NESTING || depth >= MAX_DEPTH {
        return Err(RedactError::TooDeep { at: c.i });
    }
    let b = c.b;
    let open = c.i;
    c.expect(b'{')?;
    c.ws();
    if c.peek() == Some(b'}') {
        c.i += 1;
        out.extend_from_slice(&b[open..c.i]);
        return Ok(());
    }
    out.push(b'{');
    let mut written = 0usize;
    let mut member_start = open + 1;
    loop {
        c.ws();
        let key_start = c.i + 1;
        c.string()?;
        let key = &b[key_start..c.i - 1];
        c.ws();
        c.expect(b':')?;
        c.ws();
        let value_start = c.i;
        let action = classify(key, mode);
        if !matches!(action, Action::Drop) {
            if written > 0 {
                out.push(b',');
            }
            written += 1;
        }
        match action {
            Action::Keep => {
                c.value(depth + 1)?;
                c.ws();
                out.extend_from_slice(&b[member_start..c.i]);
            }
            Action::Drop => {
                c.value(depth + 1)?;
                c.ws();
            }
            Action::Replace(with) => {
                c.value(depth + 1)?;
                out.extend_from_slice(&b[member_start..value_start]);
                out.extend_from_slice(with);
                let ws = c.i;
                c.ws();
                out.extend_from_slice(&b[ws..c.i]);
            }
            Action::Object(m) => {
                out.extend_from_slice(&b[member_start..value_start]);
                if c.peek() == Some(b'{') {
                    rewrite_object(c, out, m, depth + 1, nesting + 1)?;
                } else {
                    c.value(depth + 1)?;
                    out.extend_from_slice(&b[value_start..c.i]);
                }
                let ws = c.i;
                c.ws();
                out.extend_from_slice(&b[ws..c.i]);
            }
            Action::ArrayOf(m) => {
                out.extend_from_slice(&b[member_start..value_start]);
                if c.peek() == Some(b'[') {
                    rewrite_array(c, out, m, depth + 1, nesting)?;
                } else {
                    c.value(depth + 1)?;
                    out.extend_from_slice(&b[value_start..c.i]);
                }
                let ws = c.i;
                c.ws();
                out.extend_from_slice(&b[ws..c.i]);
            }
        }
        match c.peek() {
            Some(b',') => {
                c.i += 1;
                member_start = c.i;
            }
            Some(b'}') => {
                c.i += 1;
                out.push(b'}');
                return Ok(());
            }
            _ => return Err(c.err()),
        }
    }
}

/// At `[`: copies the array, rewriting object elements in `mode`.
fn rewrite_array(
    c: &mut Cursor<'_>,
    out: &mut Vec<u8>,
    mode: Mode,
    depth: u32,
    nesting: u32,
) -> R<()> {
    if depth >= MAX_DEPTH {
        return Err(RedactError::TooDeep { at: c.i });
    }
    let b = c.b;
    let mut copied = c.i;
    c.expect(b'[')?;
    c.ws();
    if c.peek() == Some(b']') {
        c.i += 1;
        out.extend_from_slice(&b[copied..c.i]);
        return Ok(());
    }
    loop {
        c.ws();
        if c.peek() == Some(b'{') {
            out.extend_from_slice(&b[copied..c.i]);
            rewrite_object(c, out, mode, depth + 1, nesting + 1)?;
            copied = c.i;
        } else {
            c.value(depth + 1)?;
        }
        c.ws();
        match c.peek() {
            Some(b',') => c.i += 1,
            Some(b']') => {
                c.i += 1;
                out.extend_from_slice(&b[copied..c.i]);
                return Ok(());
            }
            _ => return Err(c.err()),
        }
    }
}

/// Produces the MESSAGE_CONTENT-redacted variant of a message `d` (PROTOCOL.md,
/// "Intents"): `content` becomes `""`; `embeds`, `attachments` and
/// `components` become `[]`; `poll` is removed. The same applies inside
/// `referenced_message` (the replied-to message) and to the `message` of each
/// `message_snapshots` element (forwards), which carry message content too.
///
/// Everything else is copied byte for byte (whitespace included); key
/// matching decodes escapes, so `"cont\u0065nt"` is redacted too, and every
/// occurrence of a duplicated key is redacted. The input is validated as
/// strictly as [`validate_json_object`] along the way.
///
/// Appends to `out` and allocates nothing beyond `out`'s growth (reserve
/// `d.len()` up front to avoid even that). On error `out` is restored to its
/// original length.
pub fn redact_message_content(d: &[u8], out: &mut Vec<u8>) -> Result<(), RedactError> {
    let start = out.len();
    let r = redact_inner(d, out);
    if r.is_err() {
        out.truncate(start);
    }
    r
}

fn redact_inner(d: &[u8], out: &mut Vec<u8>) -> R<()> {
    std::str::from_utf8(d).map_err(|_| RedactError::NotUtf8)?;
    out.reserve(d.len());
    let mut c = Cursor::new(d);
    c.ws();
    out.extend_from_slice(&d[..c.i]);
    if c.peek() != Some(b'{') {
        return Err(RedactError::NotObject);
    }
    rewrite_object(&mut c, out, Mode::Message, 0, 0)?;
    let tail = c.i;
    c.ws();
    if c.i != d.len() {
        return Err(c.err());
    }
    out.extend_from_slice(&d[tail..]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> bool {
        validate_json_object(s.as_bytes()).is_ok()
    }

    #[test]
    fn validates() {
        for s in [
            "{}",
            " { } ",
            r#"{"a":1}"#,
            r#"{"a":[1,2,{"b":null}],"c":"x\"\\\/\b\f\n\r\t\u00e9y","d":-0.5e+10,"e":true,"f":false}"#,
            "{\"é\":\"ü\"}",
            r#"{"a":{"b":{"c":[[],[{}]]}}}"#,
        ] {
            assert!(ok(s), "{s}");
        }
        for s in [
            "",
            "{",
            "}",
            "[]",
            "1",
            r#""x""#,
            "{} {}",
            "{}, {}",
            r#"{"a"}"#,
            r#"{"a":}"#,
            r#"{"a":1,}"#,
            r#"{"a":[1,]}"#,
            r#"{,"a":1}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":1e}"#,
            r#"{"a":-}"#,
            r#"{"a":tru}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12G4"}"#,
            "{\"a\":\"\n\"}",
            r#"{"a":[}"#,
            r#"{"a":{]}"#,
            r#"{1:2}"#,
            r#"{"a" 1}"#,
            r#"{}, "op": 7, "x": {}"#,
        ] {
            assert!(!ok(s), "{s:?}");
        }
        assert_eq!(validate_json_object(b"[1]"), Err(RedactError::NotObject));
        assert_eq!(
            validate_json_object(b"{\"a\":\"\xff\"}"),
            Err(RedactError::NotUtf8)
        );
    }

    #[test]
    fn depth_limit() {
        let deep = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
        assert!(ok(&deep(128)));
        assert!(matches!(
            validate_json_object(deep(129).as_bytes()),
            Err(RedactError::TooDeep { .. })
        ));
        let arr = |n: usize| format!("{{\"a\":{}{}}}", "[".repeat(n), "]".repeat(n));
        assert!(ok(&arr(127)));
        assert!(!ok(&arr(128)));
    }

    fn redact(s: &str) -> String {
        let mut out = Vec::new();
        redact_message_content(s.as_bytes(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn redacts_top_level() {
        assert_eq!(
            redact(
                r#"{"id":"1","content":"secret \"x\"","embeds":[{"a":1}],"attachments":[],"components":[1],"poll":{"q":1},"tts":false}"#
            ),
            r#"{"id":"1","content":"","embeds":[],"attachments":[],"components":[],"tts":false}"#
        );
        assert_eq!(redact(r#"{"poll":{}}"#), "{}");
        assert_eq!(redact(r#" { "poll" : 1 , "a" : 2 } "#), r#" { "a" : 2 } "#);
        assert_eq!(redact(r#"{"a":1, "poll":2 }"#), r#"{"a":1}"#);
        assert_eq!(
            redact(r#"{ "content" : "x" , "b":[ 1 ] }"#),
            r#"{ "content" : "" , "b":[ 1 ] }"#
        );
        assert_eq!(redact("{ }"), "{ }");
        assert_eq!(
            redact(r#"{"cont\u0065nt":"x","content":"y"}"#),
            r#"{"cont\u0065nt":"","content":""}"#
        );
        assert_eq!(
            redact(r#"{"contents":"x","Content":"y"}"#),
            r#"{"contents":"x","Content":"y"}"#
        );
    }

    #[test]
    fn redacts_nested_messages() {
        assert_eq!(
            redact(
                r#"{"content":"a","referenced_message":{"content":"b","poll":1,"id":"2"},"x":{"content":"c"}}"#
            ),
            r#"{"content":"","referenced_message":{"content":"","id":"2"},"x":{"content":"c"}}"#
        );
        assert_eq!(
            redact(r#"{"referenced_message":null}"#),
            r#"{"referenced_message":null}"#
        );
        assert_eq!(
            redact(r#"{"message_snapshots":[{"message":{"content":"f","embeds":[1]},"k":1}, 3]}"#),
            r#"{"message_snapshots":[{"message":{"content":"","embeds":[]},"k":1}, 3]}"#
        );
    }

    #[test]
    fn redact_errors_restore_out() {
        let mut out = b"keep".to_vec();
        assert_eq!(
            redact_message_content(b"[]", &mut out),
            Err(RedactError::NotObject)
        );
        assert!(redact_message_content(br#"{"content":"x""#, &mut out).is_err());
        assert!(redact_message_content(br#"{"content":"x"} x"#, &mut out).is_err());
        assert_eq!(out, b"keep");
        let mut deep = String::new();
        for _ in 0..MAX_REDACT_NESTING + 1 {
            deep.push_str(r#"{"referenced_message":"#);
        }
        deep.push_str("null");
        for _ in 0..MAX_REDACT_NESTING + 1 {
            deep.push('}');
        }
        assert!(matches!(
            redact_message_content(deep.as_bytes(), &mut out),
            Err(RedactError::TooDeep { .. })
        ));
        assert_eq!(out, b"keep");
    }
}
