//! What one tick did: its outcome (a stable label for logs, metrics and
//! `job_runs`) and, for a tick that ran, its summary.

use crate::domain::Counts;

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum TickOutcome {
    /// All owed reminders were attempted.
    Done(Summary),
    /// Another replica holds the lock; nothing to do.
    LockHeld,
    /// The SET's reply was lost and the key is not ours; skipped.
    LockUnknown,
    /// The lease was lost mid-tick; no mail was started after that.
    LockLost(Summary),
    /// Shutdown was requested mid-tick; mail in flight finished.
    Shutdown(Summary),
    /// The SMTP server could not be reached; the rest was handed back.
    SmtpUnavailable(Summary),
    /// The SMTP server refused our login; the rest was handed back.
    SmtpAuthFailed(Summary),
    /// The SMTP relay throttled us; the rest was handed back unattempted
    /// and the next tick sends slower. Not a failure: the relay is up.
    Throttled(Summary),
    /// Results could not be written; no mail was started after that.
    RecordFailed(Summary),
    /// The send window was closed when the tick began: nothing claimed,
    /// no run recorded. `opens`: its next opening (RFC 3339, local).
    OutsideWindow { opens: String },
    /// The send window closed mid-tick; what was not handed to the relay
    /// went back unattempted.
    WindowClosed(Summary),
}

impl TickOutcome {
    /// The `outcome` label of `invoice_reminder_ticks_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Done(_) => "done",
            Self::LockHeld => "lock_held",
            Self::LockUnknown => "lock_unknown",
            Self::LockLost(_) => "lost_lock",
            Self::Shutdown(_) => "shutdown",
            Self::SmtpUnavailable(_) => "smtp_unavailable",
            Self::SmtpAuthFailed(_) => "smtp_auth_failed",
            Self::Throttled(_) => "throttled",
            Self::RecordFailed(_) => "record_failed",
            Self::OutsideWindow { .. } => "outside_window",
            Self::WindowClosed(_) => "window_closed",
        }
    }

    pub fn summary(&self) -> Option<&Summary> {
        match self {
            Self::Done(s)
            | Self::LockLost(s)
            | Self::Shutdown(s)
            | Self::SmtpUnavailable(s)
            | Self::SmtpAuthFailed(s)
            | Self::Throttled(s)
            | Self::RecordFailed(s)
            | Self::WindowClosed(s) => Some(s),
            Self::LockHeld | Self::LockUnknown | Self::OutsideWindow { .. } => None,
        }
    }
}

/// A tick that ran: which run and date, what it did, how long it took.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub run_id: i64,
    pub run_date: String,
    #[serde(flatten)]
    pub counts: Counts,
    pub duration_ms: u64,
    /// What the senders waited on, in milliseconds.
    pub waits: crate::domain::Waits,
    /// Reads of the payment holds and pauses for letters that waited
    /// before going (`last_check`): statements of their own, as many as
    /// the pace made letters wait, not as the backlog grows.
    pub hold_reads: u64,
}

impl Summary {
    /// The "tick finished" line: what the tick did, and where its time went.
    pub(super) fn log(&self, outcome: &str) {
        tracing::info!(
            outcome,
            run_date = %self.run_date,
            claimed = self.counts.claimed,
            sent = self.counts.sent,
            failed = self.counts.failed,
            discarded = self.counts.discarded,
            unknown = self.counts.unknown,
            skipped = self.counts.skipped,
            handed_back = self.counts.handed_back,
            source_problems = self.counts.source_problems,
            suppressed = self.counts.suppressed,
            superseded = self.counts.superseded,
            withheld = self.counts.withheld,
            duration_ms = self.duration_ms,
            hold_reads = self.hold_reads,
            waited_on_marks_ms = self.waits.marks,
            waited_on_results_ms = self.waits.results,
            waited_on_claims_ms = self.waits.claims,
            waited_on_pacer_ms = self.waits.pacer,
            waited_on_pool_ms = self.waits.pool,
            waited_on_relay_ms = self.waits.relay,
            idle_connections_ms = self.waits.idle_connections,
            claim_statements_ms = self.waits.claim_statements,
            claim_room_ms = self.waits.claim_room,
            mark_statements_ms = self.waits.mark_statements,
            mark_room_ms = self.waits.mark_room,
            record_statements_ms = self.waits.record_statements,
            "tick finished"
        );
    }
}
