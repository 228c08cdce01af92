//! The route buckets and their published limits (ADR-09): the table
//! docs/rate-limits.md lists, checked against it by this file's test. The
//! ids are what `X-RateLimit-Bucket` carries and what the counters shared
//! between nodes are keyed by (`api::shared`): stable across nodes.

/// A route bucket: routes that share one limit. The ids are what
/// `X-RateLimit-Bucket` carries (opaque to clients; stable across nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bucket {
    MessageCreate,
    MessageRead,
    MessageEdit,
    MessageDelete,
    BulkDelete,
    Reaction,
    Typing,
    ChannelRead,
    GuildRead,
    MemberRead,
    MemberRole,
    Kick,
    Ban,
    Dm,
    // Application commands (reads; registration writes).
    CommandRead,
    CommandWrite,
    // Connect-time reads of the bot itself.
    GatewayBot,
    UserRead,
    MyGuilds,
    ApplicationRead,
}

/// A bucket's published limit: `limit` requests per `per_ms`.
#[derive(Clone, Copy, Debug)]
pub struct BucketDef {
    pub id: &'static str,
    pub limit: u32,
    pub per_ms: u64,
}

impl Bucket {
    pub const ALL: [Bucket; 20] = [
        Bucket::MessageCreate,
        Bucket::MessageRead,
        Bucket::MessageEdit,
        Bucket::MessageDelete,
        Bucket::BulkDelete,
        Bucket::Reaction,
        Bucket::Typing,
        Bucket::ChannelRead,
        Bucket::GuildRead,
        Bucket::MemberRead,
        Bucket::MemberRole,
        Bucket::Kick,
        Bucket::Ban,
        Bucket::Dm,
        Bucket::CommandRead,
        Bucket::CommandWrite,
        Bucket::GatewayBot,
        Bucket::UserRead,
        Bucket::MyGuilds,
        Bucket::ApplicationRead,
    ];

    /// The published table (docs/rate-limits.md lists the same).
    pub const fn def(self) -> BucketDef {
        let (id, limit, per_ms) = match self {
            Bucket::MessageCreate => ("7a1f3c0e5d2b4a69", 5, 5_000),
            Bucket::MessageRead => ("2c9e4b7a1d3f5e80", 10, 1_000),
            Bucket::MessageEdit => ("5b3d8e1a7c2f4d96", 5, 5_000),
            Bucket::MessageDelete => ("9e2a6c4f1b8d3a75", 5, 1_000),
            Bucket::BulkDelete => ("4f7b1e9c3a5d2e68", 1, 1_000),
            Bucket::Reaction => ("1d8c5a3e7f2b9c46", 1, 250),
            Bucket::Typing => ("6a4e2d9b5c1f7a83", 5, 5_000),
            Bucket::ChannelRead => ("3e5a7c1d9b4f2e61", 10, 1_000),
            Bucket::GuildRead => ("8b1f4d6a2e9c5b37", 10, 1_000),
            Bucket::MemberRead => ("0c6d9f2b4a7e1d58", 10, 1_000),
            Bucket::MemberRole => ("5f2c8a4e6b1d9f03", 10, 10_000),
            Bucket::Kick => ("7d4b2f8e1a6c3d92", 5, 5_000),
            Bucket::Ban => ("2a8e6c3f9d1b5a74", 5, 5_000),
            Bucket::Dm => ("9c3f1a7d5e2b8c60", 5, 5_000),
            Bucket::CommandRead => ("6e1b3d8f2a7c4e95", 10, 1_000),
            Bucket::CommandWrite => ("3c7a9e2d5f1b8a46", 5, 20_000),
            Bucket::GatewayBot => ("b4e8a1c6d3f97205", 10, 5_000),
            Bucket::UserRead => ("d7c2f5a8e1b46390", 10, 5_000),
            Bucket::MyGuilds => ("e3a96d1f4c7b2058", 5, 5_000),
            Bucket::ApplicationRead => ("a5f1c8e3b7d26094", 10, 5_000),
        };
        BucketDef { id, limit, per_ms }
    }
}

#[cfg(test)]
mod published {
    use super::*;

    /// docs/rate-limits.md lists every bucket with the limits the code applies.
    #[test]
    fn the_published_table_matches_the_code() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/rate-limits.md"))
                .expect("docs/rate-limits.md");
        for b in Bucket::ALL {
            let d = b.def();
            let row = doc
                .lines()
                .find(|l| l.starts_with(&format!("| {} |", d.id)))
                .unwrap_or_else(|| panic!("{b:?} ({}) is not in docs/rate-limits.md", d.id));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert_eq!(cells[3], d.limit.to_string(), "{b:?} limit: {row}");
            let per = if d.per_ms % 1000 == 0 {
                format!("{} s", d.per_ms / 1000)
            } else {
                format!("{} s", d.per_ms as f64 / 1000.0)
            };
            assert_eq!(cells[4], per, "{b:?} window: {row}");
        }
        let rows = doc
            .lines()
            .filter(|l| {
                l.len() > 19
                    && l.starts_with("| ")
                    && l[2..18].bytes().all(|c| c.is_ascii_hexdigit())
            })
            .count();
        assert_eq!(rows, Bucket::ALL.len(), "one row per bucket");
    }
}
