//! What `explain` reads about invoices: their source rows (counted, with
//! the flags that decide whether they owe anything) and every reminder row
//! they have, with the run and replica that last claimed it; one statement
//! for any number of invoices (a customer's are read together). Read-only.
//!
//! The conditions are the tick's own, not re-derived: the paid and paused
//! test is `owing::owes_flags!`, a run being over is [`run_ended!`] /
//! [`run_gone!`], and the retry wait is `owing::backoff_wait!` /
//! `owing::backoff_over!`, the fragments the claim and re-claim statements
//! are built from. What is left to `commands::explain` is pure: dates from
//! these facts.

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::owing::OwingDay;
use super::owing::{backoff_over, backoff_wait, date_value, owes_flags};
use super::params::Params;
use super::reminders::Backoff;
use super::runs::{run_ended, run_gone};
use super::source_row::{SourceRow, source_columns};
use crate::domain::StepKey;
use crate::domain::{InvoiceId, ReminderId};

/// How many source rows of one key are read (all are counted).
const ROWS_READ: i64 = 10;

/// One source row of the key, with the columns that decide whether it
/// owes a reminder, as the source has them.
#[derive(Debug, Clone, Default, PartialEq, Eq, FromRow)]
pub struct SourceFacts {
    #[sqlx(flatten)]
    pub row: SourceRow,
    /// NULL counts as paid.
    pub is_paid: Option<bool>,
    /// NULL counts as not paused.
    pub paused: Option<bool>,
    pub paused_until: Option<NaiveDate>,
    /// The row passes the tick's paid and paused test today
    /// (`owing::owes_flags!`).
    pub flags_owe: bool,
    /// How many rows of the source carry this key.
    pub copies: i64,
}

/// One reminder row of the invoice, with its run, and what the tick's
/// conditions say about it now.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct ReminderFacts {
    pub id: ReminderId,
    /// The invoice it is for.
    #[serde(skip)]
    pub invoice_id: InvoiceId,
    /// The step (`reminders.period`).
    pub step: StepKey,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub claimed_at: DateTime<Utc>,
    /// `claimed_at`'s date in the customers' zone: what the
    /// `min_days_between` gap counts from.
    #[serde(skip)]
    pub claimed_on: NaiveDate,
    /// Its statement left owed invoices of the customer for the next tick
    /// (customer mode): it does not start the customer gap.
    pub continued: bool,
    pub started_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub sent_at: Option<DateTime<Utc>>,
    pub run_id: Option<i64>,
    /// The replica of `run_id` (None once the run is pruned).
    pub replica: Option<String>,
    pub message_id: Option<String>,
    /// The server's final reply to the message (sent rows).
    pub smtp_reply: Option<String>,
    /// The SHA-256 of the bytes sent, in hex (sent rows).
    pub message_sha256: Option<String>,
    /// Its run no longer works its rows ([`run_ended!`]).
    #[serde(skip)]
    pub run_ended: bool,
    /// Its run's process can no longer write a result ([`run_gone!`]).
    #[serde(skip)]
    pub run_gone: bool,
    /// A `failed` row's backoff is over: it may be retried now
    /// (`owing::backoff_over!`).
    #[serde(skip)]
    pub backoff_over: bool,
    /// When its backoff ends (None: it never used an attempt, so it has
    /// none).
    #[serde(skip)]
    pub retry_at: Option<DateTime<Utc>>,
    /// `retry_at`'s date in the customers' zone.
    #[serde(skip)]
    pub retry_on: Option<NaiveDate>,
}

/// The source rows that `explain` reads of each key, the first
/// [`ROWS_READ`] of it, each with the count of all of its key and whether
/// it passes the paid and paused test on `$today`; `{keys}` is the query
/// that names the keys.
macro_rules! source_facts_of {
    ($keys:literal) => {
        concat!(
            "SELECT * FROM (SELECT ",
            source_columns!(),
            ", s.is_paid, s.paused, ",
            date_value!("s.paused_until"),
            " AS paused_until,",
            " COALESCE((",
            owes_flags!("s"),
            "), false) AS flags_owe,",
            " count(*) OVER (PARTITION BY s.invoice_id::text) AS copies,",
            " row_number() OVER (PARTITION BY s.invoice_id::text) AS nth",
            " FROM {src} s WHERE s.invoice_id::text IN (",
            $keys,
            ")) k WHERE k.nth <= $rows"
        )
    };
}

/// Every source row whose key is one of `keys` (see [`source_facts_of!`]).
pub async fn source_rows(
    db: &Db,
    keys: &[InvoiceId],
    today: &OwingDay,
) -> Result<Vec<SourceFacts>, sqlx::Error> {
    let params = today.params().with("keys", &keys).with("rows", &ROWS_READ);
    source_facts(
        db,
        source_facts_of!("SELECT unnest($keys::text[])"),
        &params,
    )
    .await
}

/// The source rows of `customer`'s invoices (see [`source_facts_of!`]):
/// of its first `limit` keys in key order; the caller has checked that
/// the `customer_id` column exists.
pub async fn customer_source_rows(
    db: &Db,
    customer: &str,
    limit: u32,
    today: &OwingDay,
) -> Result<Vec<SourceFacts>, sqlx::Error> {
    let limit = i64::from(limit);
    let params = today
        .params()
        .with("customer", &customer)
        .with("limit", &limit)
        .with("rows", &ROWS_READ);
    let text = source_facts_of!(
        "SELECT DISTINCT c.invoice_id::text FROM {src} c
          WHERE c.customer_id::text = $customer AND c.invoice_id IS NOT NULL
          ORDER BY 1 LIMIT $limit"
    );
    source_facts(db, text, &params).await
}

async fn source_facts(
    db: &Db,
    text: &str,
    params: &Params<'_>,
) -> Result<Vec<SourceFacts>, sqlx::Error> {
    let statement = db.statement(text);
    on_db!(db, |c| statement.fetch_all(&mut *c, params).await)
}

/// Every reminder row of the invoices `keys`, oldest first, with its run's
/// replica and, for the retry wait, `backoff` as the re-claim uses it;
/// dates in the time zone `tz`.
pub async fn reminder_rows(
    db: &Db,
    keys: &[InvoiceId],
    tz: &str,
    backoff: Backoff,
) -> Result<Vec<ReminderFacts>, sqlx::Error> {
    let statement = db.statement(concat!(
        "SELECT r.id, r.invoice_id, r.period AS step, r.status, r.attempts, r.last_error, r.created_at,",
        " r.claimed_at, (r.claimed_at AT TIME ZONE $tz)::date AS claimed_on, r.continued,",
        " r.started_at, r.last_attempt_at, r.sent_at, r.run_id,",
        " j.replica_id AS replica, r.message_id, r.smtp_reply,",
        " encode(r.message_sha256, 'hex') AS message_sha256, ",
        run_ended!("j"),
        " AS run_ended, ",
        run_gone!("j"),
        " AS run_gone, ",
        backoff_over!(),
        " AS backoff_over,",
        " CASE WHEN r.attempts > 0 THEN r.last_attempt_at + ",
        backoff_wait!(),
        " END AS retry_at,",
        " CASE WHEN r.attempts > 0 THEN ((r.last_attempt_at + ",
        backoff_wait!(),
        ") AT TIME ZONE $tz)::date END AS retry_on",
        " FROM {ir}.reminders r LEFT JOIN {ir}.job_runs j ON j.id = r.run_id",
        " WHERE r.invoice_id = ANY($keys) ORDER BY r.created_at, r.id"
    ));
    let (first, max) = (backoff.first.as_secs_f64(), backoff.max.as_secs_f64());
    let tz = tz.to_owned();
    let params = Params::new()
        .with("keys", &keys)
        .with("tz", &tz)
        .with("backoff_first", &first)
        .with("backoff_max", &max);
    on_db!(db, |c| statement.fetch_all(&mut *c, &params).await)
}

/// The keys of the source's rows whose `customer_id` is `customer`, in
/// key order (at most `limit`); the caller has checked that the column
/// exists.
pub async fn customer_invoices(
    db: &Db,
    customer: &str,
    limit: u32,
) -> Result<Vec<InvoiceId>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_scalar(db.sql(
        "SELECT DISTINCT s.invoice_id::text FROM {src} s
          WHERE s.customer_id::text = $1 AND s.invoice_id IS NOT NULL
          ORDER BY 1 LIMIT $2"
    ))
    .persistent(db.named())
    .bind(customer)
    .bind(i64::from(limit))
    .fetch_all(&mut *c)
    .await)
}

/// Customer mode: for each invoice of `customer` with one, the latest day
/// (in `tz`) on which it had a reminder claimed that is `sent` or
/// `sending` and started the customer gap (its statement left nothing for
/// the next tick). `min_days_between` counts, for an invoice, from the
/// latest of the *other* invoices' days.
pub async fn customer_reminder_days(
    db: &Db,
    customer: &str,
    tz: &str,
) -> Result<Vec<(InvoiceId, NaiveDate)>, sqlx::Error> {
    let statement = db.statement(
        "SELECT r.invoice_id, max((r.claimed_at AT TIME ZONE $tz)::date) FROM {ir}.reminders r
          WHERE r.customer_id = $customer AND r.status IN ('sent', 'sending')
            AND NOT r.continued
          GROUP BY r.invoice_id",
    );
    let params = Params::new().with("customer", &customer).with("tz", &tz);
    on_db!(db, |c| statement.fetch_all(&mut *c, &params).await)
}
