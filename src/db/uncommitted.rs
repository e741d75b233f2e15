//! A mark written ahead ([`begin_progress`]): the statement of
//! [`write_progress`](super::deliveries::write_progress) in a transaction
//! left open, so it can be written while the letters before it are still
//! being sent and take effect only when the caller commits it. Until
//! [`Uncommitted::commit`] returns, no row is marked and no result
//! written; rolled back, dropped, or its connection lost, nothing is.
//!
//! A commit may begin the next transaction in the same round trip
//! (`COMMIT; BEGIN`, a [`Begun`]): the next mark is then written without a
//! round trip of its own for its `BEGIN`. The commit has taken effect, and
//! is durable, before that `BEGIN` runs.

use super::Db;
use super::deliveries::{Marks, Progress, write_on};
use crate::domain::Attempted;

/// [`write_progress`](super::deliveries::write_progress) in a transaction left open: nothing of it takes
/// effect (no row is marked, no result written) until
/// [`Uncommitted::commit`] returns, and nothing at all if it is rolled
/// back or dropped. A mark written ahead, while the rows before it are
/// still being sent, and committed only once the in-flight limit has room
/// for it (`tick::mark`). Written in `begun` when given (which must have
/// come from `db`), else in a transaction begun here.
pub async fn begin_progress(
    db: &Db,
    begun: Option<Begun>,
    run_id: i64,
    max_attempts: u32,
    marks: Marks<'_>,
    deliveries: &[Attempted],
) -> Result<Uncommitted, sqlx::Error> {
    let deadline = db.deadline();
    let mut tx = match begun {
        Some(Begun { tx }) => tx,
        None => {
            let begin = db.pool().begin_with(db.begin_sql());
            tokio::time::timeout(deadline, begin)
                .await
                .map_err(|_| db.timed_out())??
        }
    };
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
    /// With `begin_next`, the next transaction is begun in the same round
    /// trip and handed back, for the next [`begin_progress`].
    pub async fn commit(self, begin_next: bool) -> Result<(Progress, Option<Begun>), sqlx::Error> {
        let Self {
            mut tx,
            progress,
            db,
        } = self;
        if !begin_next {
            tokio::time::timeout(db.deadline(), tx.commit())
                .await
                .map_err(|_| db.timed_out())??;
            return Ok((progress, None));
        }
        // One simple query: PostgreSQL runs the COMMIT (and flushes it)
        // before the BEGIN, and stops at the first error. The transaction
        // handle stays open, now for the new transaction.
        let sql = sqlx::AssertSqlSafe(format!("COMMIT; {}", db.begin_sql().0));
        tokio::time::timeout(db.deadline(), sqlx::raw_sql(sql).execute(&mut *tx))
            .await
            .map_err(|_| db.timed_out())??;
        Ok((progress, Some(Begun { tx })))
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

/// A transaction begun with the last commit ([`Uncommitted::commit`]) and
/// nothing written in it yet. Dropped, it is rolled back before its
/// connection is used again.
#[derive(Debug)]
pub struct Begun {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
}
