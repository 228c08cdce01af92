//! Oracle: no panic, consumed length within bounds, and the head parses the
//! same from exactly its own bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use net::http::{
    parse_head, query_param, websocket_accept, write_response, write_upgrade_response,
};

fuzz_target!(|data: &[u8]| {
    match parse_head(data) {
        Ok(Some((n, head))) => {
            assert!(n <= data.len() && n <= net::http::MAX_HEAD);
            assert_eq!(parse_head(&data[..n]), Ok(Some((n, head.clone()))));
            for name in ["v", "encoding", "compress", "", "="] {
                if let Some(v) = query_param(&head.query, name) {
                    assert!(head.query.contains(v));
                }
            }
            if let Some(key) = &head.websocket_key {
                let mut out = Vec::new();
                write_upgrade_response(key, &mut out);
                assert_eq!(websocket_accept(key).len(), 28);
            }
            let mut out = Vec::new();
            write_response(
                400,
                "application/json",
                data,
                head.keep_alive,
                &[],
                &mut out,
            );
        }
        Ok(None) => assert!(data.len() < net::http::MAX_HEAD),
        Err(e) => assert!(matches!(e.status(), 400 | 431)),
    }
    // query_param on arbitrary text, with the name taken from the input too.
    let text = String::from_utf8_lossy(data);
    let name = text.split('&').next().unwrap_or("");
    let _ = query_param(&text, name);
    let _ = query_param(&text, name.get(..name.len() / 2).unwrap_or(""));
});
