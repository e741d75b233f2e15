//! What one send ended in: [`Delivery`], the one form a letter's outcome
//! takes from the send to the record. The mail layer makes it (a sent
//! message with its [`Proof`], or a failed send classified by what the
//! server may have), the send phase puts it on each of the letter's rows
//! ([`Attempted`]), the record phase hands it to `db::deliveries`, which
//! maps it to its column values in one place, and what was written is
//! counted from it again (`Counts::count_written`); a result kept for later
//! (`tick::deferred`) is the same value.

use std::fmt;

use super::{InvoiceId, ReminderId, StepKey};

/// What the SMTP server said when it took a message, and what exactly it
/// took: stored on the sent row (and, with `archive.store = "database"`,
/// the message itself in the archive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    /// The server's final reply to the message: `250 2.0.0 Ok: queued as 4F3X2`.
    pub reply: String,
    /// SHA-256 of the exact bytes handed to DATA (headers and body, before
    /// SMTP's dot-stuffing and final `.`).
    pub sha256: [u8; 32],
    /// Those bytes, when they are to be archived.
    pub archived: Option<MessageBytes>,
    /// Addresses the relay refused while it took the message for the
    /// others, each with its reply (`ada@gone.test: 550 5.1.1 ...`).
    pub refused: Vec<String>,
}

/// A sent message's bytes, shared without copying; `Debug` shows only the
/// length.
#[derive(Clone, PartialEq, Eq)]
pub struct MessageBytes(pub std::sync::Arc<[u8]>);

impl fmt::Debug for MessageBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageBytes({} bytes)", self.0.len())
    }
}

/// What one send attempt ended in, as recorded on the row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The SMTP server accepted the message.
    Sent { message_id: String, proof: Proof },
    /// Transient failure: retried on a later tick while attempts remain.
    Failed { error: String },
    /// Not delivered because the SMTP server could not be reached at all:
    /// `failed` like a transient failure, but it does not use up an attempt
    /// (nothing reached the server), so an outage cannot exhaust retries.
    Deferred { error: String },
    /// Final failure: never retried.
    Discarded { error: String },
    /// Handed over without a reply: stays `sending`, never retried.
    Unknown { error: String },
    /// Never sent, and never will be for this step: recorded `skipped`
    /// (the row keeps its claim) with the reason.
    Skipped { reason: SkipReason },
}

/// Why a claimed reminder was not sent at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Every recipient is on the suppression list.
    Suppressed,
}

impl SkipReason {
    /// As stored in `reminders.last_error` of a `skipped` row.
    pub fn label(self) -> &'static str {
        match self {
            Self::Suppressed => "suppressed",
        }
    }
}

impl Delivery {
    /// The word stored for it in a recording statement.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Sent { .. } => "sent",
            Self::Failed { .. } => "failed",
            Self::Deferred { .. } => "deferred",
            Self::Discarded { .. } => "discarded",
            Self::Unknown { .. } => "unknown",
            Self::Skipped { .. } => "skipped",
        }
    }
}

/// One finished attempt: which row, what it ended in, and what the row
/// looked like when this run claimed it (so recording it twice, after a
/// write whose reply was lost, counts the attempt once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempted {
    pub id: ReminderId,
    pub invoice: InvoiceId,
    /// The step (`reminders.period`).
    pub step: StepKey,
    /// `attempts` as claimed, before this attempt.
    pub attempts_before: i32,
    /// The Message-ID the attempt's mail carried (stored on the row).
    pub message_id: String,
    pub delivery: Delivery,
}

#[cfg(test)]
mod tests {
    use super::super::Counts;
    use super::*;

    #[test]
    fn a_failure_written_on_its_last_attempt_counts_as_discarded_and_nothing_else_moves() {
        let failed = Delivery::Failed {
            error: "451".into(),
        };
        let unknown = Delivery::Unknown {
            error: "no reply".into(),
        };
        let mut written = Counts::default();
        written.count_written(&failed, true);
        written.count_written(&failed, false);
        written.count_written(&unknown, false);
        written.count_written(
            &Delivery::Skipped {
                reason: SkipReason::Suppressed,
            },
            false,
        );
        let expected = Counts {
            discarded: 1,
            failed: 1,
            unknown: 1,
            suppressed: 1,
            ..Counts::default()
        };
        assert_eq!(written, expected);
    }
}
