//! A mark written ahead ([`begin_progress`]): the statement of
//! [`write_progress`](super::deliveries::write_progress) in a transaction
//! left open, so it can be written while the letters before it are still
//! being sent and take effect only when the caller commits it. Until
//! [`Uncommitted::commit`] returns, no row is marked and no result
//! written; rolled back, dropped, or its connection lost, nothing is.

use super::Db;
use super::deliveries::{Marks, Progress, write_on};
use crate::domain::Attempted;

/// [`write_progress`](super::deliveries::write_progress) in a transaction left open: nothing of it takes
/// effect (no row is marked, no result written) until
/// [`Uncommitted::commit`] returns, and nothing at all if it is rolled
/// back or dropped. A mark written ahead, while the rows before it are
/// still being sent, and committed only once the in-flight limit has room
/// for it (`tick::mark`).
pub async fn begin_progress(
    db: &Db,
    run_id: i64,
    max_attempts: u32,
    marks: Marks<'_>,
    deliveries: &[Attempted],
) -> Result<Uncommitted, sqlx::Error> {
    let deadline = db.deadline();
    let begin = db.pool().begin_with(db.begin_sql());
    let mut tx = tokio::time::timeout(deadline, begin)
        .await
        .map_err(|_| db.timed_out())??;
    let writing = write_on(db, &mut tx, run_id, max_attempts, marks, deliveries);
    let progress = tokio::time::timeout(deadline, writing)
        .await
        .map_err(|_| db.timed_out())??;
    Ok(Uncommitted {
        tx,
        progress,
        db: db.clone(),
    })
}

/// A [`begin_progress`] written and not committed: its transaction holds
/// the rows it marks and records until it ends.
#[derive(Debug)]
pub struct Uncommitted {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    progress: Progress,
    db: Db,
}

impl Uncommitted {
    /// Commits: from its return on, the rows are marked and the results
    /// written. An error leaves it unknown whether they were (a reply
    /// lost after the commit took effect).
    pub async fn commit(self) -> Result<Progress, sqlx::Error> {
        let Self { tx, progress, db } = self;
        tokio::time::timeout(db.deadline(), tx.commit())
            .await
            .map_err(|_| db.timed_out())??;
        Ok(progress)
    }

    /// Rolls back: nothing of it was written. A rollback that fails or
    /// runs out of time leaves the transaction to end with its connection
    /// (or by `idle_in_transaction_session_timeout`); either way it never
    /// commits.
    pub async fn rollback(self) {
        let Self { tx, db, .. } = self;
        match tokio::time::timeout(db.deadline(), tx.rollback()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "a mark written ahead could not be rolled back")
            }
            Err(_) => tracing::debug!("a mark written ahead was not rolled back in time"),
        }
    }
}
