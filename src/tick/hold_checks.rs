//! The tick's reads of the payment holds and pauses for letters about to
//! go (`last_check`): one read at a time, each covering every row that
//! asked before it began, so letters that wait at once share one.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

use crate::db;
use crate::domain::ReminderId;

/// The tick's reads of the holds for letters about to go: one at a time,
/// each covering every row that asked before it began.
#[derive(Default)]
pub(super) struct HoldChecks {
    /// Rows waiting for a read.
    asking: Mutex<HashSet<ReminderId>>,
    last: tokio::sync::Mutex<Checked>,
    /// Reads run so far.
    reads: AtomicU64,
}

/// The latest read: when it began, what it covered and found held.
#[derive(Default)]
struct Checked {
    began: Option<Instant>,
    covered: HashSet<ReminderId>,
    held: HashSet<ReminderId>,
}

impl HoldChecks {
    /// The reads run so far: one statement each, as many as the letters
    /// that waited need (none at full speed), so a count that depends on
    /// the pace, never on the backlog.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Of `ids`, those held now, by a read that began after this call.
    pub async fn held(
        &self,
        db: &db::Db,
        ids: &[ReminderId],
    ) -> Result<Vec<ReminderId>, sqlx::Error> {
        let asked = Instant::now();
        self.asking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ids.iter().copied());
        let mut last = self.last.lock().await;
        let covered = last.began.is_some_and(|began| began >= asked)
            && ids.iter().all(|id| last.covered.contains(id));
        if !covered {
            let mut batch: Vec<ReminderId> = self
                .asking
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain()
                .collect();
            batch.extend(ids.iter().copied());
            let began = Instant::now();
            self.reads.fetch_add(1, Ordering::Relaxed);
            let held = db::deliveries::withheld(db, &batch).await?;
            *last = Checked {
                began: Some(began),
                covered: batch.into_iter().collect(),
                held: held.into_iter().collect(),
            };
        }
        Ok(ids
            .iter()
            .copied()
            .filter(|id| last.held.contains(id))
            .collect())
    }
}
