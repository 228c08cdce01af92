//! A REST request's query string, checked: where a bad `limit` or id is
//! the 400 50035 a library expects, naming the field.

use net::http;

use super::body::{self, ApiError};

/// `limit` in 1..=max (default `default`), or a 400 naming it.
pub fn query_limit(query: &str, default: usize, max: usize) -> Result<usize, ApiError> {
    match http::query_param(query, "limit") {
        None => Ok(default),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::form(
                "limit",
                "NUMBER_TYPE_MAX",
                &format!("int value should be between 1 and {max}."),
            )),
        },
    }
}

pub fn query_id(query: &str, name: &str) -> Result<Option<u64>, ApiError> {
    match http::query_param(query, name) {
        None => Ok(None),
        Some(v) => body::snowflake(&serde_json::Value::String(v.to_string()))
            .map(Some)
            .ok_or_else(|| ApiError::form(name, "NUMBER_TYPE_COERCE", "Value is not snowflake.")),
    }
}

/// A boolean parameter: `true`, `True` (discord.py) or `1` is true;
/// absent or anything else, false.
pub fn query_flag(query: &str, name: &str) -> bool {
    http::query_param(query, name).is_some_and(|v| matches!(v, "true" | "True" | "1"))
}
