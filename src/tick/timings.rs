//! Where a tick's phases spent their time, for the diagnostics line a tick
//! logs at debug level (`invoice_reminder::tick=debug`): which phase waited
//! for which, and how long the database took. Timings only describe; they
//! decide nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// One kind of time spent.
#[derive(Debug, Clone, Copy)]
pub(super) enum Spent {
    /// The claimer waited for room in the claim bound.
    ClaimWaitingForRoom,
    /// The claimer read pages.
    ClaimPages,
    /// The claimer ran claim statements.
    ClaimStatements,
    /// The marker ran mark statements (with the results they carried).
    MarkStatements,
    /// The senders waited for a marked row (a send slot stood idle).
    SendWaitingForRows,
    /// The marker wrote results without a mark.
    RecordStatements,
}

const KINDS: usize = 6;

/// Accumulated times, one per [`Spent`].
#[derive(Debug, Default)]
pub(super) struct Timings {
    nanos: [AtomicU64; KINDS],
}

impl Timings {
    pub fn add(&self, spent: Spent, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        if let Some(slot) = self.nanos.get(spent as usize) {
            slot.fetch_add(nanos, Ordering::Relaxed);
        }
    }

    /// Runs `work`, adding its time to `spent`.
    pub async fn time<T>(&self, spent: Spent, work: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = work.await;
        self.add(spent, started.elapsed());
        out
    }

    fn ms(&self, spent: Spent) -> u64 {
        self.nanos
            .get(spent as usize)
            .map_or(0, |n| n.load(Ordering::Relaxed) / 1_000_000)
    }

    /// Logs the times at debug level.
    pub fn log(&self) {
        use Spent::*;
        tracing::debug!(
            claim_waiting_for_room_ms = self.ms(ClaimWaitingForRoom),
            claim_pages_ms = self.ms(ClaimPages),
            claim_statements_ms = self.ms(ClaimStatements),
            mark_statements_ms = self.ms(MarkStatements),
            send_slots_idle_ms = self.ms(SendWaitingForRows),
            record_statements_ms = self.ms(RecordStatements),
            "tick phases"
        );
    }
}
