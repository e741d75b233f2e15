//! Queries behind `audit`: what an operator needs to trust (or distrust)
//! the reminders table.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::runs::run_gone;
use crate::domain::InvoiceId;
use crate::domain::StepKey;

#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct DuplicateGroup {
    pub invoice_id: InvoiceId,
    /// The step key (column `period`, and `period` in JSON).
    #[sqlx(rename = "period")]
    #[serde(rename = "period")]
    pub step: StepKey,
    pub copies: i64,
}

/// (invoice_id, period) pairs with more than one row. Always empty while
/// the UNIQUE constraint stands; the check exists so operators can verify
/// that claim themselves.
pub async fn duplicates(db: &Db) -> Result<Vec<DuplicateGroup>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT invoice_id, period, count(*) AS copies
           FROM {ir}.reminders GROUP BY invoice_id, period HAVING count(*) > 1
          ORDER BY invoice_id, period"
    ),)
    .persistent(db.named())
    .fetch_all(&mut *c)
    .await)
}

#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct UnknownRow {
    pub reminder_id: i64,
    pub invoice_id: InvoiceId,
    /// The step key (column `period`, and `period` in JSON).
    #[sqlx(rename = "period")]
    #[serde(rename = "period")]
    pub step: StepKey,
    pub attempts: i32,
    pub run_id: Option<i64>,
    pub replica_id: Option<String>,
    pub claimed_at: DateTime<Utc>,
    /// Set only once the server accepted; look the id up in its log.
    pub message_id: Option<String>,
    pub last_error: Option<String>,
}

/// Rows whose delivery is unknown: started, still `sending`, and either
/// their run's lease is over for good (a finished run that still holds
/// results keeps it; or the row has no run any more, its `job_runs` row
/// pruned) or they were claimed longer
/// than `older_than_secs` ago (the process that claimed them hangs). Rows
/// never started are not unknown: the next tick returns them.
pub async fn unknown(db: &Db, older_than_secs: f64) -> Result<Vec<UnknownRow>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(concat!(
        "SELECT r.id AS reminder_id, r.invoice_id, r.period, r.attempts, r.run_id,
                jr.replica_id, r.claimed_at, r.message_id, r.last_error
           FROM {ir}.reminders r
           LEFT JOIN {ir}.job_runs jr ON jr.id = r.run_id
          WHERE r.status = 'sending' AND r.started_at IS NOT NULL
            AND (",
        run_gone!("jr"),
        " OR r.claimed_at < now() - make_interval(secs => $1))
          ORDER BY r.claimed_at, r.id"
    )),)
    .persistent(db.named())
    .bind(older_than_secs)
    .fetch_all(&mut *c)
    .await)
}

#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct FailedRow {
    pub reminder_id: i64,
    pub invoice_id: InvoiceId,
    /// The step key (column `period`, and `period` in JSON).
    #[sqlx(rename = "period")]
    #[serde(rename = "period")]
    pub step: StepKey,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
}

/// `failed` rows (retried while their step is due) and rows `discarded`
/// in the last 7 days (final).
pub async fn failed(db: &Db) -> Result<Vec<FailedRow>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT id AS reminder_id, invoice_id, period, status, attempts, last_error
           FROM {ir}.reminders
          WHERE status = 'failed'
             OR (status = 'discarded' AND claimed_at > now() - interval '7 days')
          ORDER BY invoice_id, id"
    ),)
    .persistent(db.named())
    .fetch_all(&mut *c)
    .await)
}

/// Reminders by status, and those sent by step (`period`): one pass.
pub async fn counts(
    db: &Db,
) -> Result<(BTreeMap<String, i64>, BTreeMap<String, i64>), sqlx::Error> {
    let rows: Vec<(String, String, i64)> = on_db!(db, |c| sqlx::query_as(
        db.sql("SELECT status, period, count(*) FROM {ir}.reminders GROUP BY status, period")
    )
    .persistent(db.named())
    .fetch_all(&mut *c)
    .await)?;
    let (mut by_status, mut sent_by_step) = (BTreeMap::new(), BTreeMap::new());
    for (status, period, n) in rows {
        let total: &mut i64 = by_status.entry(status.clone()).or_default();
        *total = total.saturating_add(n);
        if status == "sent" {
            sent_by_step.insert(period, n);
        }
    }
    Ok((by_status, sent_by_step))
}
