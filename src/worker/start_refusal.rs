//! Why a session of an application did not start (issue 29, the portal's
//! "Sessions that did not start"): an Identify or a Resume refused after
//! its token named the application. A bad token (4004) names none and is
//! not here; neither is a node's own admission or brownout op 9 (the
//! node's state, not the application's).

/// What refused the start. The order is the counters' (`AppTable`) and
/// the recent ring's: new reasons go at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartRefusal {
    /// 4014: a privileged intent asked for is not approved.
    DisallowedIntents,
    /// 4011: more servers on the shard than one session may hold.
    ShardingRequired,
    /// Op 9: a second Identify in one `max_concurrency` bucket within its spacing.
    Concurrency,
    /// Op 9: the daily session-start budget is spent.
    DailyBudget,
    /// 4010: the Identify's `shard` is malformed or out of range.
    InvalidShard,
    /// 4013: the Identify's `intents` are missing, malformed or name
    /// undefined bits.
    InvalidIntents,
    /// Op 9 to a Resume (`delivery::resume::ResumeRefusal` says why).
    Resume,
}

impl StartRefusal {
    pub const COUNT: usize = 7;
    pub const ALL: [StartRefusal; Self::COUNT] = [
        StartRefusal::DisallowedIntents,
        StartRefusal::ShardingRequired,
        StartRefusal::Concurrency,
        StartRefusal::DailyBudget,
        StartRefusal::InvalidShard,
        StartRefusal::InvalidIntents,
        StartRefusal::Resume,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    /// The name in `/api/health` (`close_4014`, `op9_concurrency`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            StartRefusal::DisallowedIntents => "close_4014",
            StartRefusal::ShardingRequired => "close_4011",
            StartRefusal::Concurrency => "op9_concurrency",
            StartRefusal::DailyBudget => "op9_daily_budget",
            StartRefusal::InvalidShard => "close_4010",
            StartRefusal::InvalidIntents => "close_4013",
            StartRefusal::Resume => "op9_resume",
        }
    }

    /// The refusal a close sent while parsing an Identify stands for (the
    /// token is then looked up to find the application); None for others.
    pub fn of_parse_close(code: u16) -> Option<StartRefusal> {
        match code {
            4010 => Some(StartRefusal::InvalidShard),
            4013 => Some(StartRefusal::InvalidIntents),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::worker::start_refusal::*;

    #[test]
    fn indexes_follow_all() {
        for (i, w) in StartRefusal::ALL.iter().enumerate() {
            assert_eq!(w.index(), i, "{w:?}");
        }
        assert_eq!(
            StartRefusal::of_parse_close(4010),
            Some(StartRefusal::InvalidShard)
        );
        assert_eq!(
            StartRefusal::of_parse_close(4013),
            Some(StartRefusal::InvalidIntents)
        );
        assert_eq!(StartRefusal::of_parse_close(4002), None);
    }
}
