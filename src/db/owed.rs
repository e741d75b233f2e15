//! Read-only listings of what is owed today, for the operator's commands
//! (`run-once --dry-run`, `audit`, `check-source`): the reminders the next
//! tick would try, and the source rows to check for problems. The tick
//! itself reads pages (`invoices`); these are bounded listings over the
//! same conditions, one pass over the source each.

use chrono::NaiveDate;
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::owing::{
    OwingDay, in_range, in_window, invoice_gap_clear, owes_flags, priced, sane_date, scan_ranges,
    windows,
};
use super::source_row::{SourceRow, source_columns};
use crate::domain::InvoiceId;
use crate::domain::StepKey;

/// A source row that owes its due step today, as a listing reads it.
#[derive(Debug, Clone, FromRow)]
pub struct OwedRow {
    #[sqlx(flatten)]
    pub row: SourceRow,
    /// The step it owes.
    pub step: StepKey,
    /// `new`, or `retry` for a `failed` row of that step with attempts left.
    pub kind: String,
    /// How many rows of the source carry its key (1 when all is well; 0
    /// for a NULL key).
    pub copies: i64,
}

/// An invoice owed a reminder today, as `run-once --dry-run` and `audit`
/// list it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OwedReminder {
    pub invoice_id: InvoiceId,
    pub number: String,
    pub customer_email: String,
    pub due_date: NaiveDate,
    /// The step it owes.
    pub step: StepKey,
    /// `new`, or `retry` for a `failed` row of that step with attempts left.
    pub kind: String,
}

impl OwedRow {
    /// The row as a listing shows it; None for a row without a key or a
    /// due date.
    pub fn reminder(&self) -> Option<OwedReminder> {
        Some(OwedReminder {
            invoice_id: self.row.invoice_id.clone()?,
            number: self.row.number.clone().unwrap_or_default(),
            customer_email: self.row.customer_email.clone().unwrap_or_default(),
            due_date: self.row.due_date?,
            step: self.step.clone(),
            kind: self.kind.clone(),
        })
    }
}

/// The first rows of a listing, and how many there are in all.
#[derive(Debug, Clone, Default)]
pub struct OwedListing {
    pub rows: Vec<OwedRow>,
    /// Rows that owe a step, new claims and retries.
    pub total: i64,
    /// Of those, the new claims (no reminder row for the step yet).
    pub total_new: i64,
}

/// SQL: `FROM ... WHERE` of the source rows `s` that owe step `w.key`
/// today, each with its reminder row `r` for the step (NULL: a new claim;
/// else a `failed` row with attempts left, a retry). Binds `$max_attempts`
/// and [`OwingDay::params`].
///
/// The source is walked once per step, over the union of its windows on
/// every local date (`v`). A row due where every date agrees owes the
/// step as it is; only the others are matched to the window of their own
/// date and calendar (at most one: a step's windows on one date and group
/// are one range), worked out once per row (`w`, kept whole by `OFFSET
/// 0`). Joined to every window instead, a row would be read once per date
/// it could be in and its own date worked out for each (BENCHMARKS.md,
/// "The survey of what is owed").
macro_rules! owed_today {
    () => {
        concat!(
            " FROM ",
            scan_ranges!(),
            " JOIN {src} s ON ",
            in_range!("s", "v"),
            " CROSS JOIN LATERAL (SELECT CASE WHEN ",
            in_range!("s", "v.sure_from", "v.sure_to"),
            " THEN v.key ELSE (SELECT w.key FROM ",
            windows!(),
            " WHERE w.key = v.key AND ",
            in_window!("s"),
            " LIMIT 1) END AS key OFFSET 0) w",
            " LEFT JOIN {ir}.reminders r ON r.invoice_id = s.invoice_id::text AND r.period = w.key",
            " WHERE w.key IS NOT NULL AND (r.id IS NULL OR (r.status = 'failed' AND r.attempts < $max_attempts)) AND ",
            owes_flags!("s"),
            " AND ",
            priced!("w.key"),
            " AND ",
            invoice_gap_clear!(anti),
        )
    };
}

#[derive(FromRow)]
struct Listed {
    #[sqlx(flatten)]
    owed: OwedRow,
    total: i64,
    total_new: i64,
}

/// The source rows that owe their due step today, as new claims or (with
/// `max_attempts` > 0) as retries of `failed` rows with attempts left, in
/// scan order: the first `limit` of them, each with its key's number of
/// source rows, and how many there are in all. Read-only, one statement:
/// the windows joined with the source and (a hash anti-join, not a probe
/// per row) with the reminders, the gap tested only for what is left, and
/// the per-key count only for the rows returned (BENCHMARKS.md, "The
/// survey of what is owed").
pub async fn owed_listing(
    db: &Db,
    today: &OwingDay,
    max_attempts: u32,
    limit: u32,
) -> Result<OwedListing, sqlx::Error> {
    let statement = db.statement(concat!(
        "SELECT o.*, (SELECT count(*) FROM {src} k WHERE k.invoice_id::text = o.invoice_id) AS copies",
        " FROM (SELECT ",
        source_columns!(),
        ", w.key AS step, CASE WHEN r.id IS NULL THEN 'new' ELSE 'retry' END AS kind,",
        " count(*) OVER () AS total, count(*) FILTER (WHERE r.id IS NULL) OVER () AS total_new",
        owed_today!(),
        " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\" LIMIT $limit) o",
        " ORDER BY o.due_date, o.invoice_id COLLATE \"C\""
    ));
    let (max_attempts, limit) = (i64::from(max_attempts), i64::from(limit));
    let params = today
        .params()
        .with("max_attempts", &max_attempts)
        .with("limit", &limit);
    let rows: Vec<Listed> = on_db!(db, |c| statement.fetch_all(&mut *c, &params).await)?;
    Ok(OwedListing {
        total: rows.first().map_or(0, |r| r.total),
        total_new: rows.first().map_or(0, |r| r.total_new),
        rows: rows.into_iter().map(|r| r.owed).collect(),
    })
}

/// Today's owed rows by step: each step due today with how many rows owe
/// it as a new claim and as a retry (steps that nobody owes are left
/// out). The same rows [`owed_listing`] counts, counted in full: the new
/// claims add up to its `total_new`.
pub async fn owed_by_step(
    db: &Db,
    today: &OwingDay,
    max_attempts: u32,
) -> Result<Vec<OwedStep>, sqlx::Error> {
    let statement = db.statement(concat!(
        "SELECT w.key AS step, count(*) FILTER (WHERE r.id IS NULL) AS new,",
        " count(*) FILTER (WHERE r.id IS NOT NULL) AS retries",
        owed_today!(),
        " GROUP BY w.key ORDER BY w.key"
    ));
    let max_attempts = i64::from(max_attempts);
    let params = today.params().with("max_attempts", &max_attempts);
    on_db!(db, |c| statement.fetch_all(&mut *c, &params).await)
}

/// One step's owed rows today ([`owed_by_step`]).
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct OwedStep {
    pub step: StepKey,
    /// Rows without a reminder for the step yet (the next tick claims them).
    pub new: i64,
    /// `failed` rows of the step with attempts left.
    pub retries: i64,
}

/// Up to `limit` unpaid, unpaused source rows that no scan meets because
/// they have no place in its order: a NULL `due_date` (no step can be
/// worked out), or a NULL key (in customer mode, a NULL `customer_id`
/// too) on a row due on or before `due_by` (the latest due date that owes
/// a step today). With the scan index the README
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
        " AND (s.due_date IS NULL OR NOT (",
        sane_date!("s.due_date"),
        ") OR (s.invoice_id IS NULL AND s.due_date <= $1)",
        " OR ($3 AND {customer} IS NULL AND s.due_date <= $1))",
        " LIMIT $2"
    )))
    .persistent(db.named())
    .bind(due_by)
    .bind(i64::from(limit))
    .bind(db.names().reads_customer())
    .fetch_all(&mut *c)
    .await)
}
