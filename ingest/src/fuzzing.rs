//! Fuzz oracles for this crate's readers of a stranger's bytes (a producer
//! connection, a Kafka message value). Each function takes one fuzz input
//! and panics when an oracle fails. Called by the libFuzzer targets in
//! `fuzz/fuzz_targets/` and, on the committed corpus, by
//! the root crate's `tests/fuzz_corpus.rs`. Not an API.

use crate::encode::{encode, encode_parts};
use crate::error::DecodeError;
use crate::frame::FrameReader;
use crate::json::{redact_message_content, validate_json_object, RedactError};
use crate::layout::{HEADER_LEN, MAX_RECORD_LEN};
use crate::record::{check_fields, ArchivedRecord, Record, VERSION};

/// What a reader handed out, owned.
pub type Item = Result<Record, DecodeError>;

/// Checks an accepted record: it passes the field checks again, its body is
/// exactly the frame's bytes in the stream, and its owned copy re-encodes
/// to a frame that decodes to the same record.
fn check_accepted(rec: &ArchivedRecord, body: &[u8], frame: Option<&[u8]>) -> Record {
    let owned = rec.to_record();
    assert_eq!(owned.check(), Ok(()), "accepted record fails check()");
    assert_eq!(owned.version, VERSION);
    if let Some(frame) = frame {
        assert_eq!(
            body,
            &frame[HEADER_LEN..],
            "last_body is not the frame's body"
        );
    }
    let mut wire = Vec::new();
    let n = encode(&owned, &mut wire);
    assert_eq!(n, wire.len());
    let mut r = FrameReader::new();
    r.push(&wire);
    match r.next() {
        Some(Ok(again)) => assert_eq!(again.to_record(), owned, "re-encoded record differs"),
        other => panic!(
            "re-encoded record not accepted: {:?}",
            other.map(|r| r.map(|_| ()))
        ),
    }
    assert!(r.next().is_none());
    owned
}

/// Drains `r` until `None` or a fatal error, checking every item; `stream`
/// is everything pushed so far (to locate frames by the byte counter).
fn drain(r: &mut FrameReader, stream: &[u8], out: &mut Vec<Item>) -> bool {
    loop {
        let before = r.stats().bytes as usize;
        let Some(x) = r.next() else {
            return false;
        };
        match x {
            Ok(rec) => {
                let owned = rec.to_record();
                let after = r.stats().bytes as usize;
                assert!(after > before && after <= stream.len());
                let body = r.last_body().to_vec();
                let frame = &stream[before..after];
                let mut check = FrameReader::new();
                check.push(frame);
                let again = check
                    .next()
                    .expect("a whole frame")
                    .expect("accepted before");
                let again = check_accepted(again, &body, Some(frame));
                assert_eq!(again, owned);
                out.push(Ok(owned));
            }
            Err(e) => {
                assert!(e.index() < DecodeError::COUNT);
                assert_eq!(DecodeError::REASONS[e.index()], e.reason());
                out.push(Err(e));
                if e.is_fatal() {
                    assert_eq!(r.fatal(), Some(e));
                    return true;
                }
            }
        }
    }
}

/// `ingest_stream` target. Input: one control byte, then a producer's byte
/// stream. Oracles: no panic; delivering the stream in arbitrary chunks
/// (into a reader with a tiny buffer, which compacts) yields exactly the
/// records, errors and counters of one-shot delivery; consumed + buffered
/// bytes account for the whole stream; a fatal error is sticky and stops
/// `push`; every accepted record passes the checks, its body is the frame's
/// bytes, and it survives re-encoding.
pub fn stream(data: &[u8]) {
    let Some((&ctl, stream)) = data.split_first() else {
        return;
    };
    let max = if ctl & 0x80 != 0 { 600 } else { MAX_RECORD_LEN };

    let mut one = FrameReader::with_max_record_len(max);
    one.push(stream);
    let mut whole = Vec::new();
    let fatal = drain(&mut one, stream, &mut whole);
    if !fatal {
        assert_eq!(one.stats().bytes as usize + one.buffered(), stream.len());
    }
    assert_eq!(
        one.stats().records as usize,
        whole.iter().filter(|x| x.is_ok()).count()
    );
    assert_eq!(
        one.stats().total_errors() as usize,
        whole.iter().filter(|x| x.is_err()).count()
    );

    let mut ch = FrameReader::with_limits(usize::from(ctl & 0x3f), max);
    let mut chunked = Vec::new();
    let mut next = chunker(ctl, usize::from(ctl % 64) + 1);
    let mut pos = 0;
    let mut stopped = false;
    while pos < stream.len() {
        let end = stream.len().min(pos + next());
        if stopped {
            let buffered = ch.buffered();
            ch.push(&stream[pos..end]);
            assert_eq!(
                ch.buffered(),
                buffered,
                "push after a fatal error took bytes"
            );
            let fatal = ch.fatal();
            assert!(matches!(ch.next(), Some(Err(e)) if Some(e) == fatal));
        } else {
            ch.push(&stream[pos..end]);
            stopped = drain(&mut ch, &stream[..end], &mut chunked);
        }
        pos = end;
    }
    assert_eq!(whole, chunked, "chunked delivery decoded differently");
    assert_eq!(
        one.stats(),
        ch.stats(),
        "chunked delivery counted differently"
    );
    if !fatal {
        assert_eq!(one.buffered(), ch.buffered());
    }
    // reset() makes the reader usable for a new connection.
    ch.reset();
    assert_eq!(ch.fatal(), None);
    assert_eq!(ch.buffered(), 0);
}

/// Chunk sizes 1..=max from a small xorshift seeded by `seed`.
fn chunker(seed: u8, max: usize) -> impl FnMut() -> usize {
    let mut s = u32::from(seed) | 0x100;
    move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        (s as usize % max) + 1
    }
}

/// `ingest_record` target. Input: bytes read two ways. (1) As a record body
/// behind a correct frame header: whatever bytecheck and the field checks
/// decide, nothing panics, and an accepted body survives re-encoding.
/// (2) As the fields of a record a producer encodes with `encode_parts`:
/// the node accepts it exactly when `check_fields` says so (with that
/// error otherwise), and every field decodes to what was encoded.
pub fn record(data: &[u8]) {
    // (1) A body of arbitrary bytes.
    let mut wire = Vec::with_capacity(HEADER_LEN + data.len());
    wire.extend_from_slice(&(data.len() as u32).to_le_bytes());
    wire.extend_from_slice(&VERSION.to_le_bytes());
    wire.extend_from_slice(&0u16.to_le_bytes());
    wire.extend_from_slice(data);
    let mut r = FrameReader::new();
    r.push(&wire);
    match r.next() {
        Some(Ok(rec)) => {
            let owned = rec.to_record();
            let body = r.last_body().to_vec();
            assert_eq!(body, data);
            let mut check = FrameReader::new();
            check.push(&wire);
            let rec = check.next().expect("frame").expect("accepted");
            assert_eq!(check_accepted(rec, &body, Some(&wire)), owned);
        }
        Some(Err(e)) => assert!(!e.is_fatal() || data.len() > MAX_RECORD_LEN),
        None => panic!("a whole frame was not read"),
    }
    assert!(r.next().is_none() || data.len() > MAX_RECORD_LEN);

    // (2) Fields from the bytes.
    let mut f = Fields(data);
    let et_len = usize::from(f.u8() % 72);
    let event_type: String = (0..et_len)
        .map(|_| match f.u8() {
            b @ 0..=233 if b % 27 == 26 => '_',
            b @ 0..=233 => char::from(b'A' + b % 27),
            234..=243 => 'a',
            244..=251 => '0',
            _ => 'É',
        })
        .collect();
    let server_id = f.u64();
    let channel_id = f.u64();
    let intent = f.u64();
    let permissions = f.u64();
    let commit = f.u64();
    let flags = (u32::from(f.u8()) & 0x7) | if f.u8() == 0xff { 1 << 31 } else { 0 };
    let mentions: Vec<u64> = (0..f.u8() % 6).map(|_| f.u64()).collect();
    let d = f.0;
    let mut wire = Vec::new();
    encode_parts(
        &event_type,
        server_id,
        channel_id,
        intent,
        permissions,
        commit,
        flags,
        &mentions,
        d,
        &mut wire,
    );
    let expected = check_fields(VERSION, event_type.as_bytes(), flags, d);
    let mut r = FrameReader::new();
    r.push(&wire);
    match r.next().expect("a whole frame") {
        Ok(rec) => {
            assert_eq!(expected, Ok(()), "accepted a record check_fields refuses");
            assert_eq!(rec.event_type(), event_type);
            assert_eq!(
                (rec.server_id(), rec.channel_id(), rec.intent()),
                (server_id, channel_id, intent)
            );
            assert_eq!(
                (rec.permissions(), rec.commit_unix_ns()),
                (permissions, commit)
            );
            assert_eq!(rec.flags(), flags);
            let got: Vec<u64> = rec.mentions().iter().map(|m| m.to_native()).collect();
            assert_eq!(got, mentions);
            assert_eq!(rec.d(), d);
        }
        Err(e) => assert_eq!(Err(e), expected, "refused for the wrong reason"),
    }
    assert!(r.next().is_none());
}

/// Reads fields off the front of a byte slice (zeros once it is empty).
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u64(&mut self) -> u64 {
        let n = self.0.len().min(8);
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        u64::from_le_bytes(b)
    }
}

/// `redact` target. Input: a record's `d`. Oracles: no panic; redaction
/// succeeds only on input the validator accepts, and fails on accepted
/// input only by nesting too deeply; its output is itself a valid JSON
/// object that redaction leaves unchanged (idempotent); `out` is appended
/// to, and restored on error; error offsets lie within the input.
pub fn redact(d: &[u8]) {
    let valid = validate_json_object(d);
    check_error_offset(valid, d.len());
    let mut out = b"keep".to_vec();
    let r = redact_message_content(d, &mut out);
    check_error_offset(r, d.len());
    match r {
        Ok(()) => {
            assert_eq!(valid, Ok(()), "redaction accepted what validation refuses");
            assert_eq!(&out[..4], b"keep");
            let red = &out[4..];
            assert_eq!(validate_json_object(red), Ok(()), "redacted output invalid");
            let mut again = Vec::new();
            assert_eq!(redact_message_content(red, &mut again), Ok(()));
            assert_eq!(again, red, "redaction is not idempotent");
        }
        Err(e) => {
            assert_eq!(out, b"keep", "out not restored on error");
            if valid.is_ok() {
                assert!(
                    matches!(e, RedactError::TooDeep { .. }),
                    "valid object refused by redaction: {e:?}"
                );
            }
        }
    }
}

fn check_error_offset(r: Result<(), RedactError>, len: usize) {
    if let Err(RedactError::Syntax { at } | RedactError::TooDeep { at }) = r {
        assert!(at <= len, "error offset {at} beyond {len}");
    }
}
