//! Customer mode's reads (`reminders.group_by = "customer"`): the source in
//! customer order, so that one read finds everything a customer is owed
//! today, new steps and due retries alike, and one mail can list it.
//!
//! [`fetch_customer_page`] walks the source a page at a time (with the
//! source index the README advises on `(customer_id::text, due_date)` over
//! unpaid rows, one index range scan per page); [`fetch_customer_rows`]
//! reads one customer by key, a page at a time (a customer whose unpaid
//! invoices fill a page alone, and `preview`). Each row says what it owes
//! ([`Owes`]) under `owing`'s conditions, and how many source rows carry
//! its key, so the caller can leave out every row that cannot be mailed
//! before it decides what goes into a customer's mail. Nothing here
//! claims: the claim re-checks every condition in its own statement.

use std::collections::HashSet;

use chrono::NaiveDate;
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::owing::{
    OwingDay, backoff_over, customer_gap_clear, gap_until, in_window, invoice_gap_clear,
    owes_flags, priced, windows,
};
use super::params::Params;
use super::source_row::{SourceRow, source_columns};
use super::suppressions::suppressed_among_on;
use crate::domain::ReminderId;
use crate::domain::StepKey;
use crate::domain::lowercase_addresses;

/// What a run's reads need to know of itself: rows it already tried this
/// tick are not retried again, nor rows out of attempts, nor rows whose
/// backoff is not over.
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    pub run_id: i64,
    /// `reminders.max_attempts`.
    pub max_attempts: i64,
    /// `reminders.retry_backoff`, in seconds.
    pub backoff_first: f64,
    /// `reminders.retry_backoff_max`, in seconds.
    pub backoff_max: f64,
}

impl Retries {
    /// The retry rules of `reminders`, for run `run_id` (0: none).
    pub fn from_settings(reminders: &crate::config::ReminderSettings, run_id: i64) -> Self {
        Self {
            run_id,
            max_attempts: i64::from(reminders.max_attempts),
            backoff_first: reminders.retry_backoff.as_secs_f64(),
            backoff_max: reminders.retry_backoff_max.as_secs_f64(),
        }
    }

    pub fn params(&self) -> Params<'_> {
        Params::new()
            .with("run_id", &self.run_id)
            .with("max_attempts", &self.max_attempts)
            .with("backoff_first", &self.backoff_first)
            .with("backoff_max", &self.backoff_max)
    }
}

/// What one row of a customer-mode read owes today.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owes {
    /// Its due step, not claimed yet.
    New,
    /// A `failed` row of its due step whose retry is due, with the
    /// Message-ID its last attempt carried.
    Retry {
        id: ReminderId,
        message_id: Option<String>,
    },
    /// A `failed` row of its due step whose backoff is not over, or a
    /// claim of another run that never started it (returned once that run
    /// is over): its customer waits, so that row and anything new go out
    /// together.
    Waiting,
    /// Its due step, but the gap keeps it back until this day.
    Held(NaiveDate),
}

/// One unpaid row of a customer-mode read that owes its due step (or is
/// kept back from it), as the source has it (unchecked).
#[derive(Debug, Clone)]
pub struct CustomerRow {
    /// The step it owes.
    pub step: StepKey,
    /// The step's window's `due_from` today (None: the last step, which
    /// never ends): the step stays due while the invoice is in it.
    pub step_from: Option<NaiveDate>,
    pub owes: Owes,
    /// How many rows of the source carry its key.
    pub copies: i64,
    pub row: SourceRow,
}

#[derive(FromRow)]
struct ReadRow {
    step: Option<StepKey>,
    step_from: Option<NaiveDate>,
    state: Option<String>,
    retry_id: Option<ReminderId>,
    retry_message_id: Option<String>,
    copies: Option<i64>,
    gap_until: Option<NaiveDate>,
    #[sqlx(flatten)]
    row: SourceRow,
}

impl ReadRow {
    fn owes(&self) -> Option<Owes> {
        Some(match self.state.as_deref()? {
            "new" => Owes::New,
            "retry" => Owes::Retry {
                id: self.retry_id?,
                message_id: self.retry_message_id.clone(),
            },
            "waiting" => Owes::Waiting,
            "held" => Owes::Held(self.gap_until?),
            _ => return None,
        })
    }
}

/// A customer-mode read: the unpaid rows `$range` selects (with a key and
/// a due date on or before `$due_by`), the first `$limit` in customer
/// index order, each with the step whose window holds its due date and
/// what it owes of it. As in the invoice scan (`invoices::PAGE`), the inner
/// `LIMIT` keeps the per-row probes out of the index scan.
macro_rules! customer_read {
    ($range:literal) => {
        customer_read!($range, "s.customer_id::text, s.due_date")
    };
    ($range:literal, $order:literal) => {
        concat!(
            "SELECT w.key AS step, w.due_from AS step_from, x.state,",
            " r.id AS retry_id, r.message_id AS retry_message_id,",
            " CASE WHEN x.state IS NOT NULL THEN",
            " (SELECT count(*) FROM {src} k WHERE k.invoice_id::text = s.invoice_id::text) END AS copies,",
            " CASE WHEN x.state = 'held' THEN ",
            gap_until!(customer),
            " END AS gap_until, ",
            source_columns!(),
            " FROM (SELECT s.* FROM {src} s WHERE ",
            $range,
            " AND NOT s.is_paid AND s.invoice_id IS NOT NULL",
            " AND s.due_date <= $due_by AND ",
            $crate::db::owing::sane_date!("s.due_date"),
            " ORDER BY ",
            $order,
            " LIMIT $limit) s",
            " LEFT JOIN LATERAL (SELECT w.key, w.due_from FROM ",
            windows!(),
            " WHERE ",
            in_window!("s"),
            " LIMIT 1) w ON TRUE",
            " LEFT JOIN LATERAL (SELECT r.id, r.status, r.attempts, r.run_id, r.message_id,",
            " r.last_attempt_at, r.started_at FROM {ir}.reminders r",
            " WHERE r.invoice_id = s.invoice_id::text AND r.period = w.key OFFSET 0) r ON TRUE",
            " CROSS JOIN LATERAL (SELECT CASE",
            " WHEN w.key IS NULL OR NOT (",
            owes_flags!("s"),
            " AND ",
            priced!("w.key"),
            " AND ",
            $crate::db::owing::window_open!(),
            ") THEN NULL",
            " WHEN r.status = 'sending' AND r.started_at IS NULL AND r.run_id IS DISTINCT FROM $run_id",
            " THEN 'waiting'",
            " WHEN r.id IS NOT NULL AND NOT (r.status = 'failed' AND r.attempts < $max_attempts",
            " AND r.run_id IS DISTINCT FROM $run_id) THEN NULL",
            // An operator's resend of an unknown mail (a `failed` row that
            // keeps its Message-ID) is not kept back by the customer gap:
            // the customer never got that mail.
            " WHEN NOT (",
            invoice_gap_clear!(probe),
            " AND (",
            customer_gap_clear!(),
            " OR (r.status = 'failed' AND r.message_id IS NOT NULL))) THEN 'held'",
            " WHEN r.id IS NULL THEN 'new'",
            " WHEN ",
            backoff_over!(),
            // `OFFSET 0`: the state worked out once per row; flattened,
            // PostgreSQL copies it into the three columns that read it and
            // runs every probe three times.
            " THEN 'retry' ELSE 'waiting' END AS state OFFSET 0) x",
            " ORDER BY s.customer_id::text, s.due_date, s.invoice_id::text COLLATE \"C\""
        )
    };
}

/// One page of the customer-mode walk.
#[derive(Debug, Clone, Default)]
pub struct CustomerPage {
    /// The examined rows that owe a step (or are kept back from one), in
    /// `(customer, due date, key)` order, unchecked.
    pub owed: Vec<CustomerRow>,
    /// Every examined row's customer key, in the page's order (the caller
    /// cuts the page at a customer boundary).
    pub customers: Vec<String>,
    /// The last examined row's `(due date, key)`: where a read of one
    /// customer continues.
    pub last: Option<(NaiveDate, String)>,
    /// The owed rows' addresses on the suppression list, lower-cased, read
    /// in the page's own transaction (one commit for both).
    pub suppressed: HashSet<String>,
}

async fn read(
    db: &Db,
    statement: &super::conn::Prepared,
    params: &Params<'_>,
) -> Result<CustomerPage, sqlx::Error> {
    let (rows, suppressed): (Vec<ReadRow>, Vec<String>) = on_db!(db, tx, |c| {
        let rows: Vec<ReadRow> = statement.fetch_all(&mut *c, params).await?;
        let asked = lowercase_addresses(
            rows.iter()
                .filter(|r| r.state.is_some())
                .filter_map(|r| r.row.customer_email.as_deref()),
        );
        let suppressed = suppressed_among_on(c, db, &asked).await?;
        Ok::<_, sqlx::Error>((rows, suppressed))
    })?;
    let mut page = CustomerPage {
        suppressed: suppressed.into_iter().collect(),
        owed: Vec::new(),
        customers: Vec::with_capacity(rows.len()),
        last: rows.last().and_then(|r| {
            Some((
                r.row.due_date?,
                r.row.invoice_id.as_ref()?.as_str().to_owned(),
            ))
        }),
    };
    for r in rows {
        // The reads select only rows with a customer key.
        page.customers
            .push(r.row.customer_id.clone().unwrap_or_default());
        let (Some(owes), Some(step)) = (r.owes(), r.step) else {
            continue;
        };
        page.owed.push(CustomerRow {
            step,
            step_from: r.step_from,
            owes,
            copies: r.copies.unwrap_or(0),
            row: r.row,
        });
    }
    Ok(page)
}

/// The next `limit` unpaid rows of the source in customer order, after
/// customer `after` (None: from the first), and what each owes today. A
/// page may end in the middle of a customer: the caller reads
/// [`CustomerPage::customers`] to cut it at a boundary.
pub async fn fetch_customer_page(
    db: &Db,
    today: &OwingDay,
    retries: &Retries,
    after: Option<&str>,
    limit: u32,
) -> Result<CustomerPage, sqlx::Error> {
    let Some(due_by) = today.due_by() else {
        return Ok(CustomerPage::default());
    };
    let statement = match after {
        None => db.statement(customer_read!(
            "s.customer_id IS NOT NULL AND $after_customer::text IS NULL"
        )),
        Some(_) => db.statement(customer_read!("s.customer_id::text > $after_customer")),
    };
    let limit = i64::from(limit);
    let after = after.map(str::to_owned);
    let params = today
        .params()
        .and(retries.params())
        .with("after_customer", &after)
        .with("due_by", &due_by)
        .with("limit", &limit);
    read(db, &statement, &params).await
}

/// The next `limit` unpaid rows of customer `customer`, after the row
/// `after` (`(due date, key)`; None: from the first), in `(due date,
/// key)` order, and what each owes today.
pub async fn fetch_customer_rows(
    db: &Db,
    today: &OwingDay,
    retries: &Retries,
    customer: &str,
    after: Option<(NaiveDate, String)>,
    limit: u32,
) -> Result<CustomerPage, sqlx::Error> {
    let Some(due_by) = today.due_by() else {
        return Ok(CustomerPage::default());
    };
    let statement = db.statement(customer_read!(
        "s.customer_id::text = $customer AND (s.due_date, s.invoice_id::text COLLATE \"C\") > (COALESCE($after_date, '-infinity'::date), COALESCE($after_key, ''))",
        "s.due_date, s.invoice_id::text COLLATE \"C\""
    ));
    let (after_date, after_key) = match after {
        Some((d, k)) => (Some(d), Some(k)),
        None => (None, None),
    };
    let limit = i64::from(limit);
    let customer = customer.to_owned();
    let params = today
        .params()
        .and(retries.params())
        .with("customer", &customer)
        .with("after_date", &after_date)
        .with("after_key", &after_key)
        .with("due_by", &due_by)
        .with("limit", &limit);
    read(db, &statement, &params).await
}

/// Every row of `customer` that owes a step (or is kept back from one),
/// read `limit` rows at a time, in `(due date, key)` order, and their
/// addresses on the suppression list, lower-cased.
pub async fn fetch_whole_customer(
    db: &Db,
    today: &OwingDay,
    retries: &Retries,
    customer: &str,
    limit: u32,
) -> Result<(Vec<CustomerRow>, HashSet<String>), sqlx::Error> {
    let mut rows = Vec::new();
    let mut suppressed = HashSet::new();
    let mut after = None;
    loop {
        let page = fetch_customer_rows(db, today, retries, customer, after, limit).await?;
        let examined = page.customers.len();
        after = page.last;
        rows.extend(page.owed);
        suppressed.extend(page.suppressed);
        if examined < usize::try_from(limit).unwrap_or(usize::MAX) || after.is_none() {
            return Ok((rows, suppressed));
        }
    }
}

/// `EXPLAIN (FORMAT JSON, VERBOSE)` of a customer-mode page after the
/// first (the statement a backlog runs most), with today's parameters.
pub async fn explain_customer_page(
    db: &Db,
    today: &OwingDay,
    retries: &Retries,
    limit: u32,
) -> Result<serde_json::Value, sqlx::Error> {
    let statement = db
        .statement(&format!(
            "EXPLAIN (FORMAT JSON, VERBOSE) {}",
            customer_read!("s.customer_id::text > $after_customer")
        ))
        .once();
    let limit = i64::from(limit);
    let due_by = today.due_by();
    let after = String::new();
    let params = today
        .params()
        .and(retries.params())
        .with("after_customer", &after)
        .with("due_by", &due_by)
        .with("limit", &limit);
    on_db!(db, |c| statement.fetch_scalar(&mut *c, &params).await)
}
