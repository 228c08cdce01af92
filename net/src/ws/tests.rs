//! Unit tests of the WebSocket framing as a whole: frames built by the
//! encoders (`frame.rs`, `close.rs`) and read back by the [`Decoder`]
//! (`decode.rs`), protocol errors, bounds and reassembly memory.

use super::decode::KEEP_REASSEMBLY_CAPACITY;
use super::frame::apply_mask;
use super::OwnedMessage as Owned;
use super::*;

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

fn client(op: OpCode, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    encode_client_frame(op, fin, MASK, payload, &mut v);
    v
}

/// Decodes one frame that must be complete and owns the resulting message.
fn one(dec: &mut Decoder, frame: &[u8]) -> Result<(usize, Option<Owned>), WsError> {
    let mut buf = frame.to_vec();
    let (n, m) = dec.decode(&mut buf)?.expect("complete frame");
    Ok((n, m.map(Owned::from)))
}

#[test]
fn opcode_conversions() {
    for b in 0u8..=0xFF {
        match OpCode::from_u8(b) {
            Some(op) => {
                assert_eq!(u8::from(op), b);
                assert_eq!(OpCode::try_from(b), Ok(op));
                assert_eq!(op.is_control(), b >= 8);
            }
            None => assert!(OpCode::try_from(b).is_err()),
        }
    }
}

#[test]
fn header_encoding_lengths() {
    let mut h = [0u8; MAX_SERVER_HEADER];
    assert_eq!(encode_header(OpCode::Text, true, 0, &mut h), 2);
    assert_eq!(h[..2], [0x81, 0]);
    assert_eq!(encode_header(OpCode::Binary, true, 125, &mut h), 2);
    assert_eq!(h[..2], [0x82, 125]);
    assert_eq!(encode_header(OpCode::Text, true, 126, &mut h), 4);
    assert_eq!(h[..4], [0x81, 126, 0, 126]);
    assert_eq!(encode_header(OpCode::Text, false, 65535, &mut h), 4);
    assert_eq!(h[..4], [0x01, 126, 0xff, 0xff]);
    assert_eq!(encode_header(OpCode::Continuation, true, 65536, &mut h), 10);
    assert_eq!(h, [0x80, 127, 0, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(encode_header(OpCode::Ping, true, usize::MAX, &mut h), 10);
    assert_eq!(h[..2], [0x89, 127]);
}

#[test]
fn encode_frame_and_close() {
    let mut out = Vec::new();
    encode_frame(OpCode::Text, b"hi", &mut out);
    assert_eq!(out, [0x81, 2, b'h', b'i']);

    out.clear();
    encode_close(1000, "bye", &mut out);
    assert_eq!(out, [0x88, 5, 0x03, 0xe8, b'b', b'y', b'e']);

    // 'é' is 2 bytes: 62 of them are 124 bytes, so the cut lands mid-char.
    let long = "é".repeat(62);
    out.clear();
    encode_close(4000, &long, &mut out);
    assert_eq!(out[1] as usize, 2 + 122);
    assert_eq!(out.len(), 2 + 2 + 122);
    assert!(std::str::from_utf8(&out[4..]).is_ok());

    let ascii = "x".repeat(200);
    out.clear();
    encode_close(1001, &ascii, &mut out);
    assert_eq!(out[1] as usize, MAX_CONTROL_PAYLOAD);
}

#[test]
fn server_frames_round_trip_through_header_parser_when_masked() {
    // A server-encoded frame is unmasked, so the decoder must refuse it.
    let mut out = Vec::new();
    encode_frame(OpCode::Text, b"x", &mut out);
    assert_eq!(
        Decoder::new(100).decode(&mut out),
        Err(WsError::Protocol("client frame is not masked"))
    );
}

#[test]
fn masked_text_rfc_example() {
    // RFC 6455 §5.7: masked "Hello".
    let mut f = [
        0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    let mut d = Decoder::new(1024);
    assert_eq!(
        d.decode(&mut f),
        Ok(Some((11, Some(Message::Text("Hello")))))
    );
    let expected = [
        0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    assert_eq!(client(OpCode::Text, true, b"Hello"), expected);
}

#[test]
fn masked_binary_and_zero_copy() {
    let mut f = client(OpCode::Binary, true, &[0, 1, 2, 255]);
    let ptr = f.as_ptr() as usize;
    let mut d = Decoder::new(1024);
    let (n, m) = d.decode(&mut f).unwrap().unwrap();
    assert_eq!(n, 10);
    let Some(Message::Binary(b)) = m else {
        panic!("{m:?}")
    };
    assert_eq!(b, [0, 1, 2, 255]);
    assert_eq!(b.as_ptr() as usize, ptr + 6, "must borrow the input buffer");
}

#[test]
fn lengths_16_and_64_bit() {
    let mut d = Decoder::new(1 << 20);
    let p = vec![b'a'; 300];
    let f = client(OpCode::Text, true, &p);
    assert_eq!(f[1], 0x80 | 126);
    assert_eq!(
        one(&mut d, &f),
        Ok((4 + 4 + 300, Some(Owned::Text("a".repeat(300)))))
    );

    let p = vec![7u8; 70_000];
    let f = client(OpCode::Binary, true, &p);
    assert_eq!(f[1], 0x80 | 127);
    assert_eq!(
        one(&mut d, &f),
        Ok((10 + 4 + 70_000, Some(Owned::Binary(p))))
    );
}

#[test]
fn non_minimal_length_encoding_is_accepted() {
    let mut f = vec![0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 3];
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(b"abc");
    assert_eq!(
        one(&mut Decoder::new(10), &f),
        Ok((17, Some(Owned::Binary(b"abc".to_vec()))))
    );
}

#[test]
fn fragmentation_with_interleaved_ping() {
    let mut d = Decoder::new(1024);
    assert!(!d.is_mid_message());
    assert_eq!(
        one(&mut d, &client(OpCode::Text, false, b"Hel")),
        Ok((9, None))
    );
    assert!(d.is_mid_message());
    assert_eq!(
        one(&mut d, &client(OpCode::Ping, true, b"p")),
        Ok((7, Some(Owned::Ping(b"p".to_vec()))))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Pong, true, b"")),
        Ok((6, Some(Owned::Pong(vec![]))))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Continuation, false, b"lo, ")),
        Ok((10, None))
    );
    assert_eq!(
        one(
            &mut d,
            &client(OpCode::Continuation, true, "wörld".as_bytes())
        ),
        Ok((12, Some(Owned::Text("Hello, wörld".into()))))
    );
    assert!(!d.is_mid_message());
    // And the next message starts clean.
    assert_eq!(
        one(&mut d, &client(OpCode::Binary, false, b"a")),
        Ok((7, None))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Continuation, true, b"b")),
        Ok((7, Some(Owned::Binary(b"ab".to_vec()))))
    );
}

#[test]
fn fragmented_utf8_split_inside_a_char() {
    let s = "€uro"; // '€' is 3 bytes
    let b = s.as_bytes();
    let mut d = Decoder::new(64);
    assert_eq!(
        one(&mut d, &client(OpCode::Text, false, &b[..1])),
        Ok((7, None))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Continuation, false, &b[1..2])),
        Ok((7, None))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Continuation, true, &b[2..])),
        Ok((4 + 2 + 4, Some(Owned::Text(s.into()))))
    );
}

#[test]
fn fragmented_invalid_utf8_fails_early_and_at_end() {
    let mut d = Decoder::new(64);
    assert_eq!(
        one(&mut d, &client(OpCode::Text, false, b"ok")),
        Ok((8, None))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Continuation, false, &[0xff])),
        Err(WsError::InvalidUtf8)
    );
    // Truncated sequence at the end of the message.
    let mut d = Decoder::new(64);
    assert_eq!(
        one(&mut d, &client(OpCode::Text, false, &[0xe2, 0x82])),
        Ok((8, None))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Continuation, true, b"")),
        Err(WsError::InvalidUtf8)
    );
}

#[test]
fn byte_by_byte_delivery() {
    let mut stream = Vec::new();
    stream.extend(client(OpCode::Text, false, b"frag"));
    stream.extend(client(OpCode::Ping, true, b"hey"));
    stream.extend(client(OpCode::Continuation, true, &[b'z'; 200]));
    stream.extend(client(OpCode::Binary, true, &vec![1u8; 70_000]));
    stream.extend(client(OpCode::Close, true, b"\x03\xe8bye"));

    let mut d = Decoder::new(100_000);
    let mut buf: Vec<u8> = Vec::new();
    let mut got = Vec::new();
    let mut fed = 0;
    while fed < stream.len() {
        buf.push(stream[fed]);
        fed += 1;
        loop {
            let before = buf.clone();
            let len = buf.len();
            match d.decode(&mut buf).unwrap() {
                None => {
                    assert_eq!(buf, before, "Ok(None) must not modify the buffer");
                    break;
                }
                Some((n, m)) => {
                    assert!(n <= len);
                    if let Some(m) = m {
                        got.push(Owned::from(m));
                    }
                    buf.drain(..n);
                }
            }
        }
    }
    assert!(buf.is_empty());
    let mut text = "frag".to_string();
    text.push_str(&"z".repeat(200));
    assert_eq!(
        got,
        vec![
            Owned::Ping(b"hey".to_vec()),
            Owned::Text(text),
            Owned::Binary(vec![1u8; 70_000]),
            Owned::Close(Some(1000), "bye".into()),
        ]
    );
}

#[test]
fn partial_header_and_payload_return_none() {
    let f = client(OpCode::Binary, true, &vec![0u8; 70_000]);
    let mut d = Decoder::new(100_000);
    for cut in [0, 1, 2, 5, 9, 10, 13, 14, 1000, f.len() - 1] {
        let mut b = f[..cut].to_vec();
        assert_eq!(d.decode(&mut b), Ok(None), "cut {cut}");
    }
}

#[test]
fn close_frames() {
    let mut d = Decoder::new(64);
    assert_eq!(
        one(&mut d, &client(OpCode::Close, true, b"")),
        Ok((6, Some(Owned::Close(None, String::new()))))
    );
    for code in [1000u16, 1001, 1003, 1007, 1011, 3000, 4000, 4999] {
        let mut p = code.to_be_bytes().to_vec();
        p.extend_from_slice("rësön".as_bytes());
        assert_eq!(
            one(&mut d, &client(OpCode::Close, true, &p)),
            Ok((6 + p.len(), Some(Owned::Close(Some(code), "rësön".into()))))
        );
    }
    for code in [
        0u16, 999, 1004, 1005, 1006, 1012, 1016, 2000, 2999, 5000, 65535,
    ] {
        assert_eq!(
            one(&mut d, &client(OpCode::Close, true, &code.to_be_bytes())),
            Err(WsError::Protocol("invalid close code")),
            "code {code}"
        );
    }
    assert_eq!(
        one(&mut d, &client(OpCode::Close, true, b"\x03")),
        Err(WsError::Protocol("close payload of one byte"))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Close, true, b"\x03\xe8\xff")),
        Err(WsError::InvalidUtf8)
    );
}

#[test]
fn close_inside_fragmented_message() {
    let mut d = Decoder::new(64);
    assert_eq!(
        one(&mut d, &client(OpCode::Binary, false, b"a")),
        Ok((7, None))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Close, true, b"\x03\xe9")),
        Ok((8, Some(Owned::Close(Some(1001), String::new()))))
    );
}

#[test]
fn protocol_errors() {
    let err = |bytes: &[u8]| {
        Decoder::new(1 << 20)
            .decode(&mut bytes.to_vec())
            .map(|_| ())
    };
    // Unmasked.
    assert_eq!(
        err(&[0x81, 0x00]),
        Err(WsError::Protocol("client frame is not masked"))
    );
    // Each RSV bit.
    for rsv in [0x40, 0x20, 0x10] {
        assert_eq!(
            err(&[0x81 | rsv, 0x80, 0, 0, 0, 0]),
            Err(WsError::Protocol("reserved bits set"))
        );
    }
    // Reserved opcodes.
    for op in [3u8, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
        assert_eq!(
            err(&[0x80 | op, 0x80]),
            Err(WsError::Protocol("reserved opcode"))
        );
    }
    // Fragmented control frames.
    for op in [0x8u8, 0x9, 0xA] {
        assert_eq!(
            err(&[op, 0x80, 0, 0, 0, 0]),
            Err(WsError::Protocol("fragmented control frame"))
        );
    }
    // Control frame longer than 125 (detected from the 2-byte header alone).
    assert_eq!(
        err(&[0x89, 0x80 | 126]),
        Err(WsError::Protocol("control frame payload too long"))
    );
    assert_eq!(
        err(&[0x88, 0x80 | 127]),
        Err(WsError::Protocol("control frame payload too long"))
    );
    // Continuation with no message.
    assert_eq!(
        err(&[0x80, 0x80]),
        Err(WsError::Protocol("continuation frame without a message"))
    );
    // 64-bit length with the top bit set.
    assert_eq!(
        err(&[0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0]),
        Err(WsError::Protocol("64-bit length has its top bit set"))
    );
    // Invalid UTF-8 in an unfragmented text frame.
    assert_eq!(
        Decoder::new(10)
            .decode(&mut client(OpCode::Text, true, &[0xc3, 0x28]))
            .map(|_| ()),
        Err(WsError::InvalidUtf8)
    );
}

#[test]
fn new_data_frame_inside_fragmented_message() {
    for op in [OpCode::Text, OpCode::Binary] {
        let mut d = Decoder::new(64);
        assert_eq!(
            one(&mut d, &client(OpCode::Text, false, b"a")),
            Ok((7, None))
        );
        assert_eq!(
            d.decode(&mut [0x80 | op.as_u8(), 0x80]).map(|_| ()),
            Err(WsError::Protocol("data frame inside a fragmented message"))
        );
    }
}

#[test]
fn too_big_fails_from_header_alone() {
    let mut d = Decoder::new(1000);
    // 16-bit length 1001: only 4 header bytes present, no mask, no payload.
    assert_eq!(
        d.decode(&mut [0x82, 0x80 | 126, 0x03, 0xE9]),
        Err(WsError::MessageTooBig)
    );
    // Exactly the limit is fine (incomplete, so None).
    assert_eq!(d.decode(&mut [0x82, 0x80 | 126, 0x03, 0xE8]), Ok(None));
    // 2^63 - 1 claimed length.
    let mut huge = [0x81, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
    assert_eq!(d.decode(&mut huge), Err(WsError::MessageTooBig));
    // Small limit applies to the 7-bit length too.
    assert_eq!(
        Decoder::new(3).decode(&mut [0x81, 0x84]),
        Err(WsError::MessageTooBig)
    );
    // ...but not to control frames, which are bounded at 125 anyway.
    assert_eq!(
        one(&mut Decoder::new(0), &client(OpCode::Ping, true, b"pp")),
        Ok((8, Some(Owned::Ping(b"pp".to_vec()))))
    );
}

#[test]
fn too_big_across_fragments() {
    let mut d = Decoder::new(10);
    assert_eq!(
        one(&mut d, &client(OpCode::Binary, false, &[0; 6])),
        Ok((12, None))
    );
    assert_eq!(
        one(&mut d, &client(OpCode::Continuation, false, &[0; 4])),
        Ok((10, None))
    );
    // 10 bytes so far: any further byte is too many, known from the header.
    assert_eq!(d.decode(&mut [0x80, 0x81]), Err(WsError::MessageTooBig));
    // An empty final fragment completes at exactly the limit.
    assert_eq!(
        one(&mut d, &client(OpCode::Continuation, true, &[])),
        Ok((6, Some(Owned::Binary(vec![0; 10]))))
    );
}

#[test]
fn reassembly_memory_is_released() {
    let mut d = Decoder::new(1 << 20);
    assert_eq!(
        one(&mut d, &client(OpCode::Binary, false, &[1; 10_000])),
        Ok((10_008, None))
    );
    let (_, m) = one(&mut d, &client(OpCode::Continuation, true, &[2; 10_000])).unwrap();
    assert!(matches!(m, Some(Owned::Binary(ref v)) if v.len() == 20_000));
    assert!(d.reassembly_capacity() >= 20_000);
    // The caller's drain loop makes one more call, which frees the buffer.
    assert_eq!(d.decode(&mut []), Ok(None));
    assert_eq!(d.reassembly_capacity(), 0);

    // Small buffers are kept for reuse.
    assert_eq!(
        one(&mut d, &client(OpCode::Text, false, b"ab")),
        Ok((8, None))
    );
    let _ = one(&mut d, &client(OpCode::Continuation, true, b"c")).unwrap();
    assert_eq!(d.decode(&mut []), Ok(None));
    assert!(d.reassembly_capacity() <= KEEP_REASSEMBLY_CAPACITY);
    assert!(!d.is_mid_message());
}

#[test]
fn error_close_codes() {
    assert_eq!(WsError::Protocol("x").close_code(), 1002);
    assert_eq!(WsError::MessageTooBig.close_code(), 1009);
    assert_eq!(WsError::InvalidUtf8.close_code(), 1007);
}

fn server(op: OpCode, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut hdr = [0u8; MAX_SERVER_HEADER];
    let n = encode_header(op, fin, payload.len(), &mut hdr);
    let mut v = hdr[..n].to_vec();
    v.extend_from_slice(payload);
    v
}

#[test]
fn client_role_reads_server_frames_without_copying() {
    let mut d = Decoder::client(1 << 20);
    assert!(d.is_client() && !Decoder::new(1).is_client());
    let mut stream = Vec::new();
    encode_frame(OpCode::Text, b"{\"op\":10}", &mut stream);
    stream.extend(server(OpCode::Text, false, b"frag"));
    stream.extend(server(OpCode::Ping, true, b"p"));
    stream.extend(server(OpCode::Continuation, true, "m\u{e9}nt".as_bytes()));
    encode_frame(OpCode::Binary, &[9u8; 70_000], &mut stream);
    encode_close(4004, "Authentication failed.", &mut stream);
    let mut got = Vec::new();
    let mut off = 0;
    while let Some((n, m)) = d.decode_unmasked(&stream[off..]).unwrap() {
        if let Some(Message::Text(t)) = m {
            // Unfragmented text borrows the input; reassembled text the decoder.
            let borrowed = stream.as_ptr_range().contains(&t.as_ptr());
            assert_eq!(borrowed, !t.starts_with("frag"), "{t}");
        }
        if let Some(m) = m {
            got.push(Owned::from(m));
        }
        off += n;
    }
    assert_eq!(off, stream.len());
    assert_eq!(
        got,
        vec![
            Owned::Text("{\"op\":10}".into()),
            Owned::Ping(b"p".to_vec()),
            Owned::Text("fragm\u{e9}nt".into()),
            Owned::Binary(vec![9u8; 70_000]),
            Owned::Close(Some(4004), "Authentication failed.".into()),
        ]
    );
    let f = server(OpCode::Text, true, &[b'a'; 300]);
    assert_eq!(d.decode_unmasked(&f[..100]), Ok(None));
    // decode (on a mutable buffer) reads the same frames in the client role.
    let mut m = f.clone();
    assert_eq!(
        d.decode(&mut m)
            .map(|r| r.map(|(n, m)| (n, m.map(Owned::from)))),
        Ok(Some((304, Some(Owned::Text("a".repeat(300))))))
    );
    assert_eq!(m, f, "an unmasked frame is left as it was");
}

#[test]
fn each_role_refuses_the_other_sides_frames() {
    let masked = client(OpCode::Text, true, b"hi");
    assert_eq!(
        Decoder::client(64).decode_unmasked(&masked),
        Err(WsError::Protocol("server frame is masked"))
    );
    assert_eq!(
        Decoder::client(64).decode(&mut masked.clone()).map(|_| ()),
        Err(WsError::Protocol("server frame is masked"))
    );
    assert_eq!(
        Decoder::new(64).decode_unmasked(&server(OpCode::Text, true, b"hi")),
        Err(WsError::Protocol("client frame is not masked"))
    );
    assert_eq!(
        Decoder::new(64).decode_unmasked(&masked),
        Err(WsError::Protocol("masked frame given to decode_unmasked"))
    );
    // The client role keeps the other checks: bounds, RSV, control length.
    assert_eq!(
        Decoder::client(3).decode_unmasked(&[0x81, 4]),
        Err(WsError::MessageTooBig)
    );
    assert_eq!(
        Decoder::client(64).decode_unmasked(&[0xC1, 0]),
        Err(WsError::Protocol("reserved bits set"))
    );
    assert_eq!(
        Decoder::client(64).decode_unmasked(&[0x89, 126]),
        Err(WsError::Protocol("control frame payload too long"))
    );
}

#[test]
fn client_close_is_masked_and_truncated() {
    let mut out = Vec::new();
    encode_client_close(1000, "bye", MASK, &mut out);
    assert_eq!(out[..2], [0x88, 0x80 | 5]);
    assert_eq!(out[2..6], MASK);
    assert_eq!(
        one(&mut Decoder::new(64), &out),
        Ok((11, Some(Owned::Close(Some(1000), "bye".into()))))
    );
    out.clear();
    encode_client_close(4000, &"\u{e9}".repeat(62), MASK, &mut out);
    assert_eq!(out[1] & 0x7f, 2 + 122);
    let (_, m) = one(&mut Decoder::new(64), &out).unwrap();
    assert!(matches!(m, Some(Owned::Close(Some(4000), r)) if r.len() == 122));
}

#[test]
fn mask_matches_naive_for_all_lengths() {
    for len in 0..40 {
        let data: Vec<u8> = (0..len as u8).collect();
        let mut fast = data.clone();
        apply_mask(&mut fast, MASK);
        let naive: Vec<u8> = data
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ MASK[i % 4])
            .collect();
        assert_eq!(fast, naive);
    }
}
