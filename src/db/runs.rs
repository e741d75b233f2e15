//! `job_runs`: one row per tick that took the lock, inserted when the lock
//! is taken (`finished_at` NULL while it runs) and completed at the end.
//! Times are the database's, so runs of different replicas can be compared
//! for overlap on one clock.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};
use uuid::Uuid;

use crate::domain::Counts;

/// How a run ended; stored as text in `job_runs.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    Done,
    LostLock,
    Shutdown,
    SmtpUnavailable,
    Error,
}

impl RunOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::LostLock => "lost_lock",
            Self::Shutdown => "shutdown",
            Self::SmtpUnavailable => "smtp_unavailable",
            Self::Error => "error",
        }
    }
}

pub async fn start_run(
    pool: &PgPool,
    replica_id: &str,
    lock_token: Option<Uuid>,
    fence_token: Option<i64>,
    period: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO job_runs (replica_id, lock_token, fence_token, period)
         VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind(replica_id)
    .bind(lock_token)
    .bind(fence_token)
    .bind(period)
    .fetch_one(pool)
    .await
}

pub async fn finish_run(
    pool: &PgPool,
    run_id: i64,
    outcome: RunOutcome,
    counts: &Counts,
    error: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE job_runs
            SET finished_at = now(), outcome = $2, claimed = $3, sent = $4, failed = $5, error = $6
          WHERE id = $1",
    )
    .bind(run_id)
    .bind(outcome.as_str())
    .bind(i64::from(counts.claimed))
    .bind(i64::from(counts.sent))
    // job_runs.failed counts every reminder not delivered this run.
    .bind(i64::from(counts.failed + counts.discarded))
    .bind(error)
    .execute(pool)
    .await?;
    Ok(())
}

#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct RunRow {
    pub id: i64,
    pub replica_id: String,
    pub lock_token: Option<Uuid>,
    pub fence_token: Option<i64>,
    pub period: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
    pub claimed: i32,
    pub sent: i32,
    pub failed: i32,
    pub error: Option<String>,
}

/// The most recent runs, newest first.
pub async fn recent_runs(pool: &PgPool, limit: u32) -> Result<Vec<RunRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, replica_id, lock_token, fence_token, period, started_at, finished_at, outcome,
                claimed, sent, failed, error
           FROM job_runs ORDER BY started_at DESC, id DESC LIMIT $1",
    )
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
}

/// The run that took the lock with `token`, if any (to name a holder).
pub async fn run_by_token(pool: &PgPool, token: Uuid) -> Result<Option<RunRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, replica_id, lock_token, fence_token, period, started_at, finished_at, outcome,
                claimed, sent, failed, error
           FROM job_runs WHERE lock_token = $1 ORDER BY id DESC LIMIT 1",
    )
    .bind(token)
    .fetch_optional(pool)
    .await
}

/// Pairs of runs whose [started_at, finished_at] intervals intersect
/// (an unfinished run counts as still running). With a working lock there
/// are none.
pub async fn overlapping_runs(pool: &PgPool) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.id, b.id
           FROM job_runs a
           JOIN job_runs b ON a.id < b.id
          WHERE a.started_at < COALESCE(b.finished_at, 'infinity')
            AND b.started_at < COALESCE(a.finished_at, 'infinity')
          ORDER BY a.id, b.id",
    )
    .fetch_all(pool)
    .await
}
