//! The suppression list: addresses no reminder goes to, compared
//! case-insensitively (PostgreSQL's `lower()` on both sides, so the
//! comparison is the database's one rule whatever the address holds), and
//! the webhook message ids seen in the last ten minutes, so a replayed
//! bounce is refused by every replica alike.
//!
//! The tick asks about a whole claimed batch in one statement, in the
//! claim's own transaction ([`suppressed_among_on`]); a bounce is recorded with its message id in one
//! transaction ([`record_bounce`]), so a request the database did not take
//! can be sent again.

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
use super::activity::{NewActivity, record_on};
use super::conn::on_db;

use crate::domain::StepKey;

/// How long a webhook message id is remembered. Timestamps more than 5
/// minutes off are refused before this is asked, so an id older than this
/// can only come with a timestamp that is refused anyway.
pub const WEBHOOK_IDS_KEPT_SECS: f64 = 600.0;

/// One suppressed address, as `suppress list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct Suppression {
    pub address: String,
    /// The operator's words, or the webhook's kind (`hard_bounce`,
    /// `complaint`, `unsubscribe`).
    pub reason: String,
    /// Who added it: `cli`, `webhook`, `postmark`, or `relay` (the SMTP
    /// relay rejected the address for good).
    pub source: String,
    /// What the webhook said about it, if anything.
    pub detail: Option<String>,
    pub suppressed_at: DateTime<Utc>,
}

/// A new entry of the list.
#[derive(Debug, Clone, Copy)]
pub struct NewSuppression<'a> {
    pub address: &'a str,
    pub reason: &'a str,
    pub source: &'a str,
    pub detail: Option<&'a str>,
}

/// What adding an address did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// The address was not on the list.
    New,
    /// It was (in any case): its reason, source and detail were replaced.
    Updated,
}

/// What a bounce did to the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BounceRecorded {
    Recorded(Added),
    /// Its message id was seen within [`WEBHOOK_IDS_KEPT_SECS`]: nothing
    /// was written.
    Replayed,
}

/// Adds `entry` (or replaces the reason of an address already listed, in
/// whatever case), with a console user's `activity` record in the same
/// transaction.
pub async fn add(
    db: &Db,
    entry: NewSuppression<'_>,
    activity: Option<&NewActivity<'_>>,
) -> Result<Added, sqlx::Error> {
    on_db!(db, tx, |c| async {
        let added = upsert(c, db, entry).await?;
        if let Some(activity) = activity {
            record_on(c, db, activity, &[]).await?;
        }
        Ok::<_, sqlx::Error>(added)
    }
    .await)
}

/// [`add`] on `c` (inside a caller's transaction).
pub(super) async fn upsert(
    c: &mut sqlx::PgConnection,
    db: &Db,
    entry: NewSuppression<'_>,
) -> Result<Added, sqlx::Error> {
    // `xmax = 0`: the row was inserted, not updated.
    let inserted: bool = sqlx::query_scalar(db.sql(
        "INSERT INTO {ir}.suppressions AS s (address, reason, source, detail)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (lower(address)) DO UPDATE
            SET reason = EXCLUDED.reason, source = EXCLUDED.source, detail = EXCLUDED.detail,
                suppressed_at = now()
         RETURNING (xmax = 0)",
    ))
    .persistent(db.named())
    .bind(entry.address)
    .bind(entry.reason)
    .bind(entry.source)
    .bind(entry.detail)
    .fetch_one(&mut *c)
    .await?;
    Ok(if inserted { Added::New } else { Added::Updated })
}

/// Removes `address` (in any case), with a console user's `activity`
/// record in the same transaction; false (and no record) if it was not
/// listed.
pub async fn remove(
    db: &Db,
    address: &str,
    activity: Option<&NewActivity<'_>>,
) -> Result<bool, sqlx::Error> {
    on_db!(db, tx, |c| async {
        let removed = remove_on(c, db, address).await?;
        if removed && let Some(activity) = activity {
            record_on(c, db, activity, &[]).await?;
        }
        Ok::<_, sqlx::Error>(removed)
    }
    .await)
}

async fn remove_on(
    c: &mut sqlx::PgConnection,
    db: &Db,
    address: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query(db.sql("DELETE FROM {ir}.suppressions WHERE lower(address) = lower($1)"))
        .persistent(db.named())
        .bind(address)
        .execute(&mut *c)
        .await
        .map(|done| done.rows_affected() > 0)
}

/// The whole list, newest first.
pub async fn list(db: &Db) -> Result<Vec<Suppression>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT address, reason, source, detail, suppressed_at
           FROM {ir}.suppressions ORDER BY suppressed_at DESC, address"
    ))
    .persistent(db.named())
    .fetch_all(&mut *c)
    .await)
}

/// The entries for `addresses` (for `explain`: why a customer's reminder
/// was skipped).
pub async fn find(db: &Db, addresses: &[String]) -> Result<Vec<Suppression>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT address, reason, source, detail, suppressed_at
           FROM {ir}.suppressions
          WHERE lower(address) = ANY (ARRAY(SELECT lower(a) FROM unnest($1::text[]) a))
          ORDER BY address"
    ))
    .persistent(db.named())
    .bind(addresses)
    .fetch_all(&mut *c)
    .await)
}

/// Which of `addresses` are suppressed, as given (so the caller compares
/// its own strings): one statement, one index probe per address.
pub async fn suppressed_among(db: &Db, addresses: &[String]) -> Result<Vec<String>, sqlx::Error> {
    if addresses.is_empty() {
        return Ok(Vec::new());
    }
    on_db!(db, |c| suppressed_among_on(c, db, addresses).await)
}

/// [`suppressed_among`] on `c` (inside a caller's transaction: a claim
/// asks about its rows' addresses in its own).
pub(crate) async fn suppressed_among_on(
    c: &mut sqlx::PgConnection,
    db: &Db,
    addresses: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    if addresses.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(db.sql(
        "SELECT a FROM unnest($1::text[]) a
          WHERE EXISTS (SELECT 1 FROM {ir}.suppressions s WHERE lower(s.address) = lower(a))",
    ))
    .persistent(db.named())
    .bind(addresses)
    .fetch_all(&mut *c)
    .await
}

/// Records a bounce: with a webhook message id, first remembers it
/// ([`remember_id`]), refusing one seen before; then suppresses the
/// address. One transaction: either both are written or neither, so the
/// sender may retry a request that failed here.
pub async fn record_bounce(
    db: &Db,
    webhook_id: Option<&str>,
    entry: NewSuppression<'_>,
) -> Result<BounceRecorded, sqlx::Error> {
    on_db!(db, tx, |c| {
        if let Some(id) = webhook_id
            && !remember_id(c, db, id).await?
        {
            return Ok(BounceRecorded::Replayed);
        }
        upsert(c, db, entry).await.map(BounceRecorded::Recorded)
    })
}

/// Remembers a webhook message id without suppressing anything (a soft
/// bounce, logged and ignored): false if it was seen before. Forgets old
/// ids like [`record_bounce`] does.
pub async fn remember_webhook_id(db: &Db, id: &str) -> Result<bool, sqlx::Error> {
    on_db!(db, tx, |c| remember_id(c, db, id).await)
}

/// Forgets the ids older than [`WEBHOOK_IDS_KEPT_SECS`], then remembers
/// `id`: false if it was seen in that time. Every way an id is remembered
/// goes through here, so the table holds ten minutes of ids, whatever the
/// bounces were.
async fn remember_id(c: &mut sqlx::PgConnection, db: &Db, id: &str) -> Result<bool, sqlx::Error> {
    sqlx::query(db.sql(
        "DELETE FROM {ir}.webhook_ids
          WHERE received_at < now() - make_interval(secs => $1)",
    ))
    .persistent(db.named())
    .bind(WEBHOOK_IDS_KEPT_SECS)
    .execute(&mut *c)
    .await?;
    let fresh = sqlx::query(
        db.sql("INSERT INTO {ir}.webhook_ids (id) VALUES ($1) ON CONFLICT (id) DO NOTHING"),
    )
    .persistent(db.named())
    .bind(id)
    .execute(&mut *c)
    .await?
    .rows_affected()
        > 0;
    Ok(fresh)
}

/// A reminder recorded `skipped`, as `audit` lists it.
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct SkippedRow {
    pub reminder_id: i64,
    pub invoice_id: crate::domain::InvoiceId,
    /// The step key (column `period`, and `period` in JSON).
    #[serde(rename = "period")]
    pub step: StepKey,
    /// Why (`suppressed`).
    pub reason: Option<String>,
    pub claimed_at: DateTime<Utc>,
}

/// Rows `skipped` in the last 7 days, newest first, at most `limit`, and
/// how many there are in all.
pub async fn skipped(db: &Db, limit: i64) -> Result<(i64, Vec<SkippedRow>), sqlx::Error> {
    type Row = (
        i64,
        i64,
        crate::domain::InvoiceId,
        StepKey,
        Option<String>,
        DateTime<Utc>,
    );
    let rows: Vec<Row> = on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT count(*) OVER (), id, invoice_id, period, last_error, claimed_at
           FROM {ir}.reminders
          WHERE status = 'skipped' AND claimed_at > now() - interval '7 days'
          ORDER BY claimed_at DESC, id DESC
          LIMIT $1"
    ))
    .persistent(db.named())
    .bind(limit)
    .fetch_all(&mut *c)
    .await)?;
    let total = rows.first().map_or(0, |r| r.0);
    let listed = rows
        .into_iter()
        .map(
            |(_, reminder_id, invoice_id, step, reason, claimed_at)| SkippedRow {
                reminder_id,
                invoice_id,
                step,
                reason,
                claimed_at,
            },
        )
        .collect();
    Ok((total, listed))
}
