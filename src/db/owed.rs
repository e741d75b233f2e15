//! Read-only listings of what is owed today, for the operator's commands
//! (`run-once --dry-run`, `audit`, `check-source`): the reminders the next
//! tick would try, and the source rows to check for problems. The tick
//! itself reads pages (`invoices`); these are bounded listings over the
//! same conditions.

use chrono::NaiveDate;
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::invoices::{Owed, SourceRow, bind_owed, owed_conditions, source_columns, window_arrays};
use crate::domain::InvoiceId;
use crate::stages::Window;

/// An invoice owed a reminder today (for `run-once --dry-run` and `audit`).
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct OwedReminder {
    pub invoice_id: InvoiceId,
    pub number: String,
    pub customer_email: String,
    pub due_date: NaiveDate,
    /// The step it owes.
    pub step: String,
    /// `new`, or `retry` for a `failed` row of that step with attempts left.
    pub kind: String,
}

/// The rows of the source that owe their due step today, joined with the
/// step and that step's reminder row: `$4`-`$6` the windows, `$7` the
/// attempts a retry may have used (0: no retries).
macro_rules! owed_rows {
    () => {
        concat!(
            " FROM unnest($4::text[], $5::date[], $6::date[]) AS w(key, due_from, due_to)",
            " JOIN {src} s ON s.due_date >= COALESCE(w.due_from, '-infinity'::date) AND s.due_date <= w.due_to",
            " LEFT JOIN {ir}.reminders r ON r.invoice_id = s.invoice_id::text AND r.period = w.key",
            " WHERE (r.id IS NULL OR (r.status = 'failed' AND r.attempts < $7))",
            owed_conditions!(),
        )
    };
}

#[derive(FromRow)]
struct OwedRow {
    #[sqlx(flatten)]
    reminder: OwedReminder,
    total: i64,
}

/// Every invoice that owes its due step today, as a new claim or (with
/// `max_attempts`) as a retry of a `failed` row, in `(due_date, id)` order;
/// at most `limit`, and how many there are in all, in one statement. Rows
/// with a NULL key are left out (they are source problems). Read-only.
pub async fn owed_now(
    db: &Db,
    windows: &[Window],
    owed: Owed<'_>,
    max_attempts: Option<u32>,
    limit: u32,
) -> Result<(Vec<OwedReminder>, i64), sqlx::Error> {
    let (keys, froms, tos) = window_arrays(windows);
    let sql = db.sql(concat!(
        "SELECT s.invoice_id::text AS invoice_id, COALESCE(s.invoice_number::text, '') AS number,",
        " COALESCE(s.email::text, '') AS customer_email, s.due_date, w.key AS step,",
        " CASE WHEN r.id IS NULL THEN 'new' ELSE 'retry' END AS kind, count(*) OVER () AS total",
        owed_rows!(),
        " AND s.invoice_id IS NOT NULL",
        " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\" LIMIT $8"
    ));
    let rows: Vec<OwedRow> = on_db!(db, |c| bind_owed!(
        sqlx::query_as(sql).persistent(db.named()),
        owed
    )
    .bind(&keys)
    .bind(&froms)
    .bind(&tos)
    .bind(i64::from(max_attempts.unwrap_or(0)))
    .bind(i64::from(limit))
    .fetch_all(&mut *c)
    .await)?;
    let total = rows.first().map_or(0, |r| r.total);
    Ok((rows.into_iter().map(|r| r.reminder).collect(), total))
}

/// A source row that owes a reminder today, and how many rows of the
/// source carry its key (1 when all is well; 0 for a NULL key).
#[derive(Debug, Clone, FromRow)]
pub struct CheckedRow {
    #[sqlx(flatten)]
    pub row: SourceRow,
    pub copies: i64,
}

/// The first `limit` source rows that owe their due step today (new or
/// retry), in scan order, each with the number of rows carrying its key:
/// what `audit` and `check-source` check for problems. Costs one probe of
/// the source by key per row returned, on top of the scan.
pub async fn owed_rows_to_check(
    db: &Db,
    windows: &[Window],
    owed: Owed<'_>,
    max_attempts: u32,
    limit: u32,
) -> Result<Vec<CheckedRow>, sqlx::Error> {
    let (keys, froms, tos) = window_arrays(windows);
    let sql = db.sql(concat!(
        "SELECT ",
        source_columns!(),
        ", (SELECT count(*) FROM {src} k WHERE k.invoice_id::text = s.invoice_id::text) AS copies",
        owed_rows!(),
        " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\" LIMIT $8"
    ));
    on_db!(db, |c| bind_owed!(
        sqlx::query_as(sql).persistent(db.named()),
        owed
    )
    .bind(&keys)
    .bind(&froms)
    .bind(&tos)
    .bind(i64::from(max_attempts))
    .bind(i64::from(limit))
    .fetch_all(&mut *c)
    .await)
}

/// Up to `limit` unpaid, unpaused source rows that no scan meets because
/// they have no place in its order: a NULL `due_date` (no step can be
/// worked out), or a NULL key on a row due on or before `due_by` (the
/// latest due date that owes a step today). With the scan index the README
/// advises, the NULL due dates are one index range and the NULL keys a
/// pass over the index's owed part; without it, one pass over the source.
pub async fn unusable_rows(
    db: &Db,
    due_by: NaiveDate,
    limit: u32,
) -> Result<Vec<SourceRow>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(concat!(
        "SELECT ",
        source_columns!(),
        " FROM {src} s WHERE NOT s.is_paid AND s.paused IS NOT TRUE",
        " AND (s.due_date IS NULL OR (s.invoice_id IS NULL AND s.due_date <= $1))",
        " LIMIT $2"
    )))
    .persistent(db.named())
    .bind(due_by)
    .bind(i64::from(limit))
    .fetch_all(&mut *c)
    .await)
}
