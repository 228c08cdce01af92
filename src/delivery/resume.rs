//! Why a Resume is answered with op 9 (`d:false`), one reason per cause a
//! bot author or an operator would act on differently. Counted by reason
//! (`gatewayd_resume_refusals_total{reason}`); the client always sees the
//! same op 9 and identifies again.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeRefusal {
    /// No such session here: never created, ended (1000/1001 close, window
    /// passed, 4000 not resumed in time) or on a node that is gone.
    UnknownSession,
    /// The Resume's token is not the session's (the session is untouched).
    TokenMismatch,
    /// Events were dropped while the session was away (its ring was full):
    /// a replay would have a hole.
    EventsLost,
    /// The client's `seq` is older than what the session still holds.
    SeqNotHeld,
    /// The events after `seq` were overwritten in the worker's arena.
    Overwritten,
    /// The session is on another worker and the connection could not be
    /// moved there.
    NotMovable,
}

impl ResumeRefusal {
    pub const ALL: [ResumeRefusal; 6] = [
        ResumeRefusal::UnknownSession,
        ResumeRefusal::TokenMismatch,
        ResumeRefusal::EventsLost,
        ResumeRefusal::SeqNotHeld,
        ResumeRefusal::Overwritten,
        ResumeRefusal::NotMovable,
    ];
    pub const COUNT: usize = Self::ALL.len();

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            ResumeRefusal::UnknownSession => "unknown_session",
            ResumeRefusal::TokenMismatch => "token_mismatch",
            ResumeRefusal::EventsLost => "events_lost",
            ResumeRefusal::SeqNotHeld => "seq_not_held",
            ResumeRefusal::Overwritten => "overwritten",
            ResumeRefusal::NotMovable => "not_movable",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for ResumeRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ResumeRefusal::UnknownSession => "unknown session",
            ResumeRefusal::TokenMismatch => "token does not match the session",
            ResumeRefusal::EventsLost => "events were dropped while the session was away",
            ResumeRefusal::SeqNotHeld => "seq no longer held",
            ResumeRefusal::Overwritten => "events after seq were overwritten in the arena",
            ResumeRefusal::NotMovable => "the session is on a worker the connection cannot reach",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_index_and_a_distinct_label() {
        let mut labels = std::collections::BTreeSet::new();
        for (i, r) in ResumeRefusal::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert!(labels.insert(r.label()));
        }
    }
}
