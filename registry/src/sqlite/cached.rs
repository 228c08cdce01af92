//! `query_row` and `execute` through the connection's statement cache
//! (rusqlite's own prepare the SQL text again on every call): what every
//! statement file of this backend uses.

use rusqlite::Connection;

pub(crate) trait Cached {
    fn query_row_cached<T, P: rusqlite::Params, F>(
        &self,
        sql: &str,
        p: P,
        f: F,
    ) -> rusqlite::Result<T>
    where
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>;
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, p: P) -> rusqlite::Result<usize>;
}

impl Cached for Connection {
    fn query_row_cached<T, P: rusqlite::Params, F>(
        &self,
        sql: &str,
        p: P,
        f: F,
    ) -> rusqlite::Result<T>
    where
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(p, f)
    }
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, p: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(p)
    }
}
