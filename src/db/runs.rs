//! `job_runs`: one row per tick that took the lock, inserted when the lock
//! is taken (`finished_at` NULL while it runs) and completed at the end.
//! Times are the database's, so runs of different replicas can be compared
//! for overlap on one clock.
//!
//! **The run's lease.** While a run works, and afterwards while its process
//! still holds results the database would not take, it keeps `lease_until`
//! ahead of the database clock. A lease is extended only while it has not
//! run out: once `lease_until` has passed, the run is over for good (its
//! process died, or could not reach the database in time), and nothing
//! revives it. A run that ends with nothing held closes its lease at once.
//! Other runs return the rows an over run claimed but never started, and
//! only then (with `reminders.resend_unknown_after`) resend its unknown
//! ones: its result can no longer arrive.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use super::Db;
use super::conn::on_db;
use crate::domain::Counts;

/// SQL: the run `$j` (a `LEFT JOIN` of `job_runs`, all NULL when the row
/// has no run, or its run was pruned) no longer works its rows: it
/// finished, its lease ran out, or it is gone. Its started rows are
/// unknown; its unstarted rows may be returned.
macro_rules! run_ended {
    ($j:literal) => {
        concat!(
            "(",
            $j,
            ".id IS NULL OR ",
            $j,
            ".finished_at IS NOT NULL OR COALESCE(",
            $j,
            ".lease_until, '-infinity') < now())"
        )
    };
}
pub(crate) use run_ended;

/// SQL: the process of run `$j` (as in [`run_ended!`]) can no longer write
/// a result for its rows: its lease is over for good (a finished run whose
/// process still holds results keeps its lease), or it is gone.
macro_rules! run_gone {
    ($j:literal) => {
        concat!(
            "(",
            $j,
            ".id IS NULL OR COALESCE(",
            $j,
            ".lease_until, '-infinity') < now())"
        )
    };
}
pub(crate) use run_gone;

/// How a run ended; stored as text in `job_runs.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    Done,
    LostLock,
    Shutdown,
    SmtpUnavailable,
    /// The SMTP server refused our login: a configuration problem.
    SmtpAuthFailed,
    /// The SMTP relay throttled us; the rest goes on the next tick.
    Throttled,
    /// The send window closed: what was not handed to the relay went back
    /// unattempted, for its next opening.
    WindowClosed,
    /// Results could not be recorded; sending stopped.
    RecordFailed,
    Error,
}

impl RunOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::LostLock => "lost_lock",
            Self::Shutdown => "shutdown",
            Self::SmtpUnavailable => "smtp_unavailable",
            Self::SmtpAuthFailed => "smtp_auth_failed",
            Self::Throttled => "throttled",
            Self::WindowClosed => "window_closed",
            Self::RecordFailed => "record_failed",
            Self::Error => "error",
        }
    }
}

/// A run about to start.
#[derive(Debug, Clone, Copy)]
pub struct NewRun<'a> {
    pub replica_id: &'a str,
    /// The lock it works under (token, fencing token, lock key); None
    /// without a lock.
    pub lock: Option<(Uuid, i64, &'a str)>,
    /// `job_runs.run_date`: the tick's "today".
    pub run_date: &'a str,
    /// How long its lease is trusted from now; None without a lock.
    pub lease: Option<Duration>,
}

/// Records a run and returns its id. The fencing token is recorded before
/// any claim can present it, so the fencing floor covers every token drawn.
pub async fn start_run(db: &Db, run: NewRun<'_>) -> Result<i64, sqlx::Error> {
    on_db!(db, |c| {
        sqlx::query_scalar(
        db.sql("INSERT INTO {ir}.job_runs (replica_id, lock_token, fence_token, lock_key, run_date, lease_until)
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
         RETURNING id"),
    )
    .persistent(db.named())
    .bind(run.replica_id)
    .bind(run.lock.map(|l| l.0))
    .bind(run.lock.map(|l| l.1))
    .bind(run.lock.map(|l| l.2))
    .bind(run.run_date)
    .bind(run.lease.map(|d| d.as_secs_f64()))
    .fetch_one(&mut *c)
    .await
    })
}

/// Keeps the leases of `runs` ahead of the database clock by `lease`, each
/// only while it has not run out (a lease over is over for good).
pub async fn extend_leases(db: &Db, runs: &[i64], lease: Duration) -> Result<(), sqlx::Error> {
    on_db!(db, |c| sqlx::query(db.sql(
        "UPDATE {ir}.job_runs SET lease_until = now() + make_interval(secs => $2)
          WHERE id = ANY($1) AND lease_until >= now()"
    ),)
    .persistent(db.named())
    .bind(runs)
    .bind(lease.as_secs_f64())
    .execute(&mut *c)
    .await
    .map(|_| ()))
}

/// Ends the leases of the finished `runs` now: their process has written
/// everything it held for them.
pub async fn close_leases(db: &Db, runs: &[i64]) -> Result<(), sqlx::Error> {
    on_db!(db, |c| sqlx::query(db.sql(
        "UPDATE {ir}.job_runs SET lease_until = LEAST(lease_until, now())
          WHERE id = ANY($1) AND finished_at IS NOT NULL"
    ),)
    .persistent(db.named())
    .bind(runs)
    .execute(&mut *c)
    .await
    .map(|_| ()))
}

/// How a run ended, as `finish_run` records it.
#[derive(Debug, Clone, Copy)]
pub struct RunEnd<'a> {
    pub outcome: RunOutcome,
    pub counts: &'a Counts,
    pub error: Option<&'a str>,
    /// The process still holds results of this run that the database would
    /// not take: the lease stays (and is kept) until they are written.
    pub keeping_results: bool,
}

/// Records how run `run_id` ended; closes its lease unless it is keeping
/// results.
pub async fn finish_run(db: &Db, run_id: i64, end: RunEnd<'_>) -> Result<(), sqlx::Error> {
    let counts = end.counts;
    on_db!(db, |c| sqlx::query(db.sql(
        "UPDATE {ir}.job_runs
            SET finished_at = now(), outcome = $2, claimed = $3, sent = $4, failed = $5, error = $6,
                source_problems = $7, suppressed = $9, superseded = $10,
                lease_until = CASE WHEN $8 THEN lease_until ELSE LEAST(lease_until, now()) END
          WHERE id = $1"
    ),)
    .persistent(db.named())
    .bind(run_id)
    .bind(end.outcome.as_str())
    .bind(i64::from(counts.claimed))
    .bind(i64::from(counts.sent))
    // job_runs.failed counts every reminder not delivered this run.
    .bind(i64::from(counts.failed) + i64::from(counts.discarded))
    .bind(end.error)
    .bind(i64::from(counts.source_problems))
    .bind(end.keeping_results)
    .bind(i64::from(counts.suppressed))
    .bind(i64::from(counts.superseded))
    .execute(&mut *c)
    .await
    .map(|_| ()))
}

#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct RunRow {
    pub id: i64,
    pub replica_id: String,
    pub lock_token: Option<Uuid>,
    pub fence_token: Option<i64>,
    pub run_date: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub lease_until: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
    pub claimed: i32,
    pub sent: i32,
    pub failed: i32,
    pub error: Option<String>,
}

macro_rules! run_columns {
    () => {
        "id, replica_id, lock_token, fence_token, run_date, started_at, finished_at,
         lease_until, outcome, claimed, sent, failed, error"
    };
}

/// The most recent runs, newest first.
pub async fn recent_runs(db: &Db, limit: u32) -> Result<Vec<RunRow>, sqlx::Error> {
    let sql = db.sql(concat!(
        "SELECT ",
        run_columns!(),
        " FROM {ir}.job_runs ORDER BY started_at DESC, id DESC LIMIT $1"
    ));
    on_db!(db, |c| sqlx::query_as(sql)
        .persistent(db.named())
        .bind(i64::from(limit))
        .fetch_all(&mut *c)
        .await)
}

/// The run that took the lock with `token`, if any (to name a holder).
pub async fn run_by_token(db: &Db, token: Uuid) -> Result<Option<RunRow>, sqlx::Error> {
    let sql = db.sql(concat!(
        "SELECT ",
        run_columns!(),
        " FROM {ir}.job_runs WHERE lock_token = $1 ORDER BY id DESC LIMIT 1"
    ));
    on_db!(db, |c| sqlx::query_as(sql)
        .persistent(db.named())
        .bind(token)
        .fetch_optional(&mut *c)
        .await)
}

/// Pairs of runs whose [started_at, end] intervals intersect, where a run
/// ends when it finished or, if it never did (its process died), when its
/// lease ran out. With a working lock there are none.
pub async fn overlapping_runs(db: &Db) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT a.id, b.id
           FROM {ir}.job_runs a
           JOIN {ir}.job_runs b ON a.id < b.id
          WHERE a.started_at < COALESCE(b.finished_at, b.lease_until, 'infinity')
            AND b.started_at < COALESCE(a.finished_at, a.lease_until, 'infinity')
          ORDER BY a.id, b.id"
    ),)
    .persistent(db.named())
    .fetch_all(&mut *c)
    .await)
}
