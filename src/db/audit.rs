//! Queries behind `audit`: what an operator needs to trust (or distrust)
//! the reminders table.

use chrono::{DateTime, Utc};
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

/// `failed` rows (retried while their step is due) and rows `discarded`
/// in the last 7 days (final).
pub async fn failed(pool: &PgPool) -> Result<Vec<FailedRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id AS reminder_id, invoice_id, period, status, attempts, last_error
           FROM reminders
          WHERE status = 'failed'
             OR (status = 'discarded' AND claimed_at > now() - interval '7 days')
          ORDER BY invoice_id, id",
    )
    .fetch_all(pool)
    .await
}

/// Row counts by status.
pub async fn counts_by_status(pool: &PgPool) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as("SELECT status, count(*) FROM reminders GROUP BY status ORDER BY status")
        .fetch_all(pool)
        .await
}

/// Reminders sent, by step (`period`).
pub async fn sent_by_step(pool: &PgPool) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT period, count(*) FROM reminders WHERE status = 'sent'
          GROUP BY period ORDER BY period",
    )
    .fetch_all(pool)
    .await
}
