//! Queries behind `audit`: what an operator needs to trust (or distrust)
//! the reminders table.

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::{FromRow, PgPool};

#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct DuplicateGroup {
    pub invoice_id: i64,
    pub period: String,
    pub copies: i64,
}

/// (invoice_id, period) pairs with more than one row. Always empty while
/// the UNIQUE constraint stands; the check exists so operators can verify
/// that claim themselves.
pub async fn duplicates(pool: &PgPool) -> Result<Vec<DuplicateGroup>, sqlx::Error> {
    sqlx::query_as(
        "SELECT invoice_id, period, count(*) AS copies
           FROM reminders GROUP BY invoice_id, period HAVING count(*) > 1
          ORDER BY invoice_id, period",
    )
    .fetch_all(pool)
    .await
}

#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct UnknownRow {
    pub reminder_id: i64,
    pub invoice_id: i64,
    pub period: String,
    pub attempts: i32,
    pub run_id: Option<i64>,
    pub replica_id: Option<String>,
    pub claimed_at: DateTime<Utc>,
    pub last_error: Option<String>,
}

/// Rows whose delivery is unknown: `sending`, and either their run has
/// finished or they were claimed longer than `older_than_secs` ago (the
/// process that claimed them died or hangs).
pub async fn unknown(pool: &PgPool, older_than_secs: f64) -> Result<Vec<UnknownRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT r.id AS reminder_id, r.invoice_id, r.period, r.attempts, r.run_id,
                jr.replica_id, r.claimed_at, r.last_error
           FROM reminders r
           LEFT JOIN job_runs jr ON jr.id = r.run_id
          WHERE r.status = 'sending'
            AND (jr.finished_at IS NOT NULL
                 OR r.claimed_at < now() - make_interval(secs => $1))
          ORDER BY r.claimed_at, r.id",
    )
    .bind(older_than_secs)
    .fetch_all(pool)
    .await
}

#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct FailedRow {
    pub reminder_id: i64,
    pub invoice_id: i64,
    pub period: String,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
}

/// `failed` (will be retried) and `discarded` (final) rows of a period.
pub async fn failed(pool: &PgPool, period: &str) -> Result<Vec<FailedRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id AS reminder_id, invoice_id, period, status, attempts, last_error
           FROM reminders
          WHERE period = $1 AND status IN ('failed', 'discarded')
          ORDER BY invoice_id",
    )
    .bind(period)
    .fetch_all(pool)
    .await
}

#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct MissingRow {
    pub invoice_id: i64,
    pub due_date: NaiveDate,
}

/// Overdue invoices with no reminder row for `period` (owed, not yet
/// claimed). At most `limit` rows; see `count_missing` for the total.
pub async fn missing(
    pool: &PgPool,
    cutoff: NaiveDate,
    period: &str,
    limit: u32,
) -> Result<Vec<MissingRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT i.id AS invoice_id, i.due_date
           FROM invoices i
          WHERE i.paid_at IS NULL AND i.due_date < $1
            AND NOT EXISTS (SELECT 1 FROM reminders r WHERE r.invoice_id = i.id AND r.period = $2)
          ORDER BY i.due_date, i.id
          LIMIT $3",
    )
    .bind(cutoff)
    .bind(period)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
}

pub async fn count_missing(
    pool: &PgPool,
    cutoff: NaiveDate,
    period: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*)
           FROM invoices i
          WHERE i.paid_at IS NULL AND i.due_date < $1
            AND NOT EXISTS (SELECT 1 FROM reminders r WHERE r.invoice_id = i.id AND r.period = $2)",
    )
    .bind(cutoff)
    .bind(period)
    .fetch_one(pool)
    .await
}

/// Row counts by status, for one period or (None) all periods.
pub async fn counts_by_status(
    pool: &PgPool,
    period: Option<&str>,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT status, count(*) FROM reminders
          WHERE $1::text IS NULL OR period = $1
          GROUP BY status ORDER BY status",
    )
    .bind(period)
    .fetch_all(pool)
    .await
}
