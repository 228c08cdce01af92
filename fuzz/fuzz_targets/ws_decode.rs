//! Input: one control byte choosing the chunking, then the client byte stream.
//! Oracle: no panic, consumption within bounds, `Ok(None)` leaves the buffer
//! alone, and chunked delivery decodes exactly like one-shot delivery.
#![no_main]

use libfuzzer_sys::fuzz_target;
use net::ws::{Decoder, Message, WsError};

const LIMIT: usize = 4096;

#[derive(Debug, PartialEq)]
enum Owned {
    Text(String),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Close(Option<u16>, String),
}

fn own(m: Message<'_>) -> Owned {
    match m {
        Message::Text(s) => Owned::Text(s.into()),
        Message::Binary(b) => Owned::Binary(b.into()),
        Message::Ping(b) => Owned::Ping(b.into()),
        Message::Pong(b) => Owned::Pong(b.into()),
        Message::Close(c, r) => Owned::Close(c, r.into()),
    }
}

/// Decodes `stream` delivered in chunks whose sizes come from `next_chunk`.
fn run(stream: &[u8], mut next_chunk: impl FnMut() -> usize) -> (Vec<Owned>, Option<WsError>) {
    let mut dec = Decoder::new(LIMIT);
    let mut buf = Vec::new();
    let mut got = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let end = stream.len().min(pos + next_chunk().max(1));
        buf.extend_from_slice(&stream[pos..end]);
        pos = end;
        loop {
            let snapshot = buf.clone();
            let len = buf.len();
            match dec.decode(&mut buf) {
                Err(e) => return (got, Some(e)),
                Ok(None) => {
                    assert_eq!(buf, snapshot);
                    break;
                }
                Ok(Some((n, m))) => {
                    assert!(n <= len && n >= 6);
                    if let Some(m) = m {
                        got.push(own(m));
                    }
                    buf.drain(..n);
                }
            }
        }
    }
    (got, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, stream)) = data.split_first() else {
        return;
    };
    let whole = run(stream, || usize::MAX);
    // xorshift seeded by the control byte; chunk sizes 1..=max_chunk.
    let max_chunk = usize::from(ctl % 32) + 1;
    let mut s = u32::from(ctl) | 0x100;
    let chunked = run(stream, move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        (s as usize % max_chunk) + 1
    });
    assert_eq!(whole, chunked);
});
