//! Which worker serves what, as docs/rest.md documents it (written out
//! here, not imported from the node: the tests hold the node to the doc).

use serde_json::Value;

fn mix(id: u64, workers: usize) -> usize {
    ((id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % workers as u64) as usize
}

/// `api::owner_of`: the worker serving an application's token.
pub fn owner(app: u64, workers: usize) -> usize {
    mix(app, workers)
}

/// `api::commit_worker`: the worker committing a server's messages.
pub fn commit_worker(server: u64, workers: usize) -> usize {
    mix(server, workers)
}

/// A snowflake given as a JSON string (0 if it is not one).
pub fn id_of(v: &Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}
