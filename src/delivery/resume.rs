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
    /// The session is held by another node that did not answer within the
    /// hand-off deadline (dead, frozen, unreachable), or gave a broken answer.
    NodeUnreachable,
    /// This node has no room for the session (worker full, ring storage
    /// used up, the hand-off queue full).
    NoRoom,
    /// The holder's and this node's streams could not be lined up (the
    /// nodes do not consume the same stream in the same order, or are too
    /// far apart): moving it would risk a gap or a duplicate.
    StreamCut,
    /// Crash recovery: no summary (or no checkpoint) of the session in the
    /// session store: it was never recoverable, or has expired there.
    RecoveryNoSummary,
    /// Crash recovery: what the dead node sent after its checkpoint cannot
    /// be proven (a journal gap, the client's seq beyond the proof, a
    /// permission change, a dispatch from outside the topic).
    RecoveryUnproven,
    /// Crash recovery: the session store (Redis) or the topic did not answer.
    RecoveryStoreDown,
    /// Crash recovery: the topic no longer retains the records to replay.
    RecoveryRetention,
}

impl ResumeRefusal {
    pub const ALL: [ResumeRefusal; 13] = [
        ResumeRefusal::UnknownSession,
        ResumeRefusal::TokenMismatch,
        ResumeRefusal::EventsLost,
        ResumeRefusal::SeqNotHeld,
        ResumeRefusal::Overwritten,
        ResumeRefusal::NotMovable,
        ResumeRefusal::NodeUnreachable,
        ResumeRefusal::NoRoom,
        ResumeRefusal::StreamCut,
        ResumeRefusal::RecoveryNoSummary,
        ResumeRefusal::RecoveryUnproven,
        ResumeRefusal::RecoveryStoreDown,
        ResumeRefusal::RecoveryRetention,
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
            ResumeRefusal::NodeUnreachable => "node_unreachable",
            ResumeRefusal::NoRoom => "no_room",
            ResumeRefusal::StreamCut => "stream_cut",
            ResumeRefusal::RecoveryNoSummary => "recovery_no_summary",
            ResumeRefusal::RecoveryUnproven => "recovery_unproven",
            ResumeRefusal::RecoveryStoreDown => "recovery_store_down",
            ResumeRefusal::RecoveryRetention => "recovery_retention",
        }
    }

    pub const fn index(self) -> usize {
        self as usize
    }

    /// The reason with this index (a hand-off answer's status byte).
    pub fn from_index(i: usize) -> Option<ResumeRefusal> {
        Self::ALL.get(i).copied()
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
            ResumeRefusal::NodeUnreachable => "the node holding the session did not answer in time",
            ResumeRefusal::NoRoom => "no room for the session on this node",
            ResumeRefusal::StreamCut => "the two nodes' event streams could not be lined up",
            ResumeRefusal::RecoveryNoSummary => {
                "crash recovery: the session is not in the session store"
            }
            ResumeRefusal::RecoveryUnproven => {
                "crash recovery: the dead node's stream cannot be proven"
            }
            ResumeRefusal::RecoveryStoreDown => {
                "crash recovery: the session store or the topic did not answer"
            }
            ResumeRefusal::RecoveryRetention => {
                "crash recovery: the topic no longer has the records"
            }
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
