//! The claim protocol: how a reminder goes from "owed" to "sent" without
//! ever being sent twice.
//!
//! 1. **Claim before send.** A batch of invoice ids owing one step (the
//!    `period`, e.g. `overdue`) is claimed with one `INSERT ... ON CONFLICT
//!    (invoice_id, period) DO NOTHING RETURNING` that re-checks that each is
//!    still unpaid, unpaused and owes that step. Only the rows this statement
//!    inserted are mailed, by this run. A second sender (lock lost, lock
//!    bypassed, paused holder) inserts nothing and sends nothing: the UNIQUE
//!    constraint, not the lock, is what makes duplicates impossible.
//! 2. **Status after accept.** Claimed rows are `sending`. When the SMTP
//!    server accepts, the row becomes `sent` (with `sent_at`, `message_id`);
//!    a transient failure makes it `failed`; a permanent one, invalid data
//!    or the last allowed attempt makes it `discarded`. Every update is
//!    guarded by `run_id = this run AND status = 'sending'`.
//! 3. **Retries are claims too.** `failed` rows are re-claimed on a later
//!    tick by an `UPDATE ... WHERE status = 'failed'` over rows locked with
//!    `FOR UPDATE SKIP LOCKED`: two replicas can never re-claim the same row.
//!    Only while their step is still due: a failed row of a superseded step
//!    becomes `discarded` instead ("superseded by final").
//! 4. **Hand back what was never started.** When a run ends, every row it
//!    still holds in `sending` whose send never began (lease lost, shutdown,
//!    SMTP or database gone) is returned: a first claim is deleted, a retry
//!    goes back to `failed`. Only a row whose SMTP transaction had begun can
//!    stay `sending`.
//! 5. **Unknown stays unknown.** A row left `sending` by a process that died
//!    mid-send, or whose send ended without a reply, may or may not have
//!    been delivered. We never resend it (at-most-once); `audit` lists it.
//!
//! 6. **Fencing.** With a lock, every claim transaction first advances the
//!    lock's high-water mark in `lock_fences` with its fencing token, and
//!    claims nothing ([`ClaimError::Fenced`]) if a newer holder has already
//!    written: a paused holder that wakes up cannot claim a single row.
//!
//! Claims insert in `invoice_id` order so two concurrent claimers of
//! overlapping batches take the unique-index locks in the same order and
//! cannot deadlock.

use chrono::NaiveDate;
use sqlx::{FromRow, PgPool, Postgres, Transaction};

use super::invoices::{Owed, owed_conditions, window_arrays};
use super::locks::advance_fence;
use crate::domain::{Claimed, Counts, Customer, Delivery, Invoice, InvoiceId, ReminderId};
use crate::stages::Window;

/// The fencing token a claim presents, and the lock it was drawn for.
#[derive(Debug, Clone, Copy)]
pub struct Fence<'a> {
    pub lock_key: &'a str,
    pub token: i64,
}

/// Why a claim claimed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// A newer lock holder has already written: this holder is stale.
    #[error("fencing token {token} is older than the newest lock holder's; claim refused")]
    Fenced { token: i64 },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Opens the claim transaction and, with a fence, advances the lock's
/// high-water mark first (or refuses).
async fn begin_fenced<'c>(
    pool: &'c PgPool,
    fence: Option<Fence<'_>>,
) -> Result<Transaction<'c, Postgres>, ClaimError> {
    let mut tx = pool.begin().await?;
    if let Some(fence) = fence
        && !advance_fence(&mut tx, fence.lock_key, fence.token).await?
    {
        tx.rollback().await?;
        return Err(ClaimError::Fenced { token: fence.token });
    }
    Ok(tx)
}

/// A claimed row joined with its invoice and customer.
#[derive(FromRow)]
struct ClaimedRow {
    reminder_id: ReminderId,
    invoice_id: InvoiceId,
    attempts: i32,
    period: String,
    number: String,
    amount_cents: i64,
    currency: String,
    due_date: NaiveDate,
    customer_name: String,
    customer_email: String,
    customer_locale: Option<String>,
}

impl From<ClaimedRow> for Claimed {
    fn from(r: ClaimedRow) -> Self {
        Claimed {
            id: r.reminder_id,
            attempts: r.attempts,
            period: r.period,
            invoice: Invoice {
                id: r.invoice_id,
                number: r.number,
                amount_cents: r.amount_cents,
                currency: r.currency,
                due_date: r.due_date,
            },
            customer: Customer {
                name: r.customer_name,
                email: r.customer_email,
                locale: r.customer_locale,
            },
        }
    }
}

/// The columns every claim returns, from `claimed c` joined with the
/// invoice and customer.
const CLAIMED_COLUMNS: &str = "
         SELECT c.id AS reminder_id, c.invoice_id, c.attempts, c.period,
                i.number, i.amount_cents, i.currency, i.due_date,
                cu.name AS customer_name, cu.email AS customer_email, cu.locale AS customer_locale
           FROM claimed c
           JOIN invoices i ON i.id = c.invoice_id
           JOIN customers cu ON cu.id = i.customer_id
          ORDER BY c.invoice_id";

/// Claims the step of `window` for `invoice_ids` for run `run_id`,
/// re-checking in the same statement that each invoice is still unpaid,
/// unpaused, in the window and not reminded within the gap. Returns only
/// the rows this call inserted. With a `fence`, the claim commits only if
/// no newer lock holder has written.
pub async fn claim_batch(
    pool: &PgPool,
    invoice_ids: &[InvoiceId],
    window: &Window,
    owed: Owed<'_>,
    run_id: i64,
    fence: Option<Fence<'_>>,
) -> Result<Vec<Claimed>, ClaimError> {
    let mut tx = begin_fenced(pool, fence).await?;
    let claimed: Vec<ClaimedRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH claimed AS (
             INSERT INTO reminders (invoice_id, period, status, run_id, fence_token)
             SELECT i.id, $2, 'sending', $3, $4
               FROM invoices i
              WHERE i.id = ANY($1)
                AND i.due_date >= COALESCE($8, '-infinity'::date) AND i.due_date <= $9
                {}
              ORDER BY i.id
             ON CONFLICT (invoice_id, period) DO NOTHING
             RETURNING id, invoice_id, attempts, period
         ){CLAIMED_COLUMNS}",
        owed_conditions!("5", "6", "7")
    )))
    .bind(invoice_ids)
    .bind(&window.step.key)
    .bind(run_id)
    .bind(fence.map(|f| f.token))
    .bind(owed.today)
    .bind(i64::from(owed.min_days_between))
    .bind(owed.timezone)
    .bind(window.due_from)
    .bind(window.due_to)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(claimed.into_iter().map(Claimed::from).collect())
}

/// Re-claims up to `limit` `failed` reminders whose step is still their
/// invoice's due step (one of `windows`), with attempts left, for invoices
/// that still owe a reminder. Rows this run already tried are skipped, so
/// each row gets at most one attempt per tick.
pub async fn reclaim_failed(
    pool: &PgPool,
    windows: &[Window],
    owed: Owed<'_>,
    run_id: i64,
    max_attempts: u32,
    limit: u32,
    fence: Option<Fence<'_>>,
) -> Result<Vec<Claimed>, ClaimError> {
    let (keys, froms, tos) = window_arrays(windows);
    let mut tx = begin_fenced(pool, fence).await?;
    let claimed: Vec<ClaimedRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH picked AS (
             SELECT r.id
               FROM reminders r
               JOIN invoices i ON i.id = r.invoice_id
               JOIN unnest($1::text[], $2::date[], $3::date[]) AS w(key, due_from, due_to)
                 ON w.key = r.period
                AND i.due_date >= COALESCE(w.due_from, '-infinity'::date) AND i.due_date <= w.due_to
              WHERE r.status = 'failed'
                AND r.attempts < $4
                AND r.run_id IS DISTINCT FROM $5
                {}
              ORDER BY r.id
              LIMIT $6
                FOR UPDATE OF r SKIP LOCKED
         ), claimed AS (
             UPDATE reminders r
                SET status = 'sending', run_id = $5, claimed_at = now(), fence_token = $7
               FROM picked
              WHERE r.id = picked.id AND r.status = 'failed'
             RETURNING r.id, r.invoice_id, r.attempts, r.period
         ){CLAIMED_COLUMNS}",
        owed_conditions!("8", "9", "10")
    )))
    .bind(&keys)
    .bind(&froms)
    .bind(&tos)
    .bind(i64::from(max_attempts))
    .bind(run_id)
    .bind(i64::from(limit))
    .bind(fence.map(|f| f.token))
    .bind(owed.today)
    .bind(i64::from(owed.min_days_between))
    .bind(owed.timezone)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(claimed.into_iter().map(Claimed::from).collect())
}

/// `failed` rows whose step is no longer their invoice's due step become
/// `discarded` ("superseded by <step>"): a superseded step is never sent
/// late. Returns how many.
pub async fn supersede_failed(pool: &PgPool, windows: &[Window]) -> Result<u64, sqlx::Error> {
    let (keys, froms, tos) = window_arrays(windows);
    let done = sqlx::query(
        "UPDATE reminders r
            SET status = 'discarded', last_error = 'superseded by ' || w.key
           FROM invoices i, unnest($1::text[], $2::date[], $3::date[]) AS w(key, due_from, due_to)
          WHERE r.status = 'failed'
            AND i.id = r.invoice_id
            AND i.due_date >= COALESCE(w.due_from, '-infinity'::date) AND i.due_date <= w.due_to
            AND r.period <> w.key",
    )
    .bind(&keys)
    .bind(&froms)
    .bind(&tos)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Records the outcome of a set of attempts in one statement. Only rows
/// still `sending` under `run_id` are touched. A `Failed` that used the last
/// of `max_attempts` becomes `discarded`; a `Deferred` does not count as an
/// attempt.
pub async fn record_deliveries(
    pool: &PgPool,
    run_id: i64,
    max_attempts: u32,
    deliveries: &[(ReminderId, Delivery)],
) -> Result<Counts, sqlx::Error> {
    if deliveries.is_empty() {
        return Ok(Counts::default());
    }
    let mut ids = Vec::with_capacity(deliveries.len());
    let mut kinds = Vec::with_capacity(deliveries.len());
    let mut message_ids: Vec<Option<String>> = Vec::with_capacity(deliveries.len());
    let mut errors: Vec<Option<String>> = Vec::with_capacity(deliveries.len());
    for (id, delivery) in deliveries {
        ids.push(*id);
        kinds.push(delivery.kind());
        match delivery {
            Delivery::Sent { message_id } => {
                message_ids.push(Some(message_id.clone()));
                errors.push(None);
            }
            Delivery::Failed { error }
            | Delivery::Deferred { error }
            | Delivery::Discarded { error }
            | Delivery::Unknown { error } => {
                message_ids.push(None);
                errors.push(Some(error.clone()));
            }
        }
    }
    let statuses: Vec<(String,)> = sqlx::query_as(
        "UPDATE reminders r
            SET status = CASE
                    WHEN u.kind = 'unknown' THEN 'sending'
                    WHEN u.kind = 'deferred' THEN 'failed'
                    WHEN u.kind = 'failed' AND r.attempts + 1 >= $5 THEN 'discarded'
                    ELSE u.kind END,
                attempts = CASE WHEN u.kind = 'deferred' THEN r.attempts ELSE r.attempts + 1 END,
                message_id = COALESCE(u.message_id, r.message_id),
                last_error = CASE
                    WHEN u.kind = 'sent' THEN NULL
                    WHEN u.kind = 'failed' AND r.attempts + 1 >= $5
                        THEN 'gave up after ' || (r.attempts + 1) || ' attempts: ' || u.error
                    ELSE u.error END,
                sent_at = CASE WHEN u.kind = 'sent' THEN now() ELSE r.sent_at END
           FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[])
                AS u(id, kind, message_id, error)
          WHERE r.id = u.id AND r.run_id = $6 AND r.status = 'sending'
      RETURNING CASE WHEN u.kind = 'unknown' THEN 'unknown' ELSE r.status END",
    )
    .bind(&ids)
    .bind(&kinds)
    .bind(&message_ids)
    .bind(&errors)
    .bind(i64::from(max_attempts))
    .bind(run_id)
    .fetch_all(pool)
    .await?;
    let mut recorded = Counts::default();
    for (status,) in statuses {
        match status.as_str() {
            "sent" => recorded.sent += 1,
            "failed" => recorded.failed += 1,
            "discarded" => recorded.discarded += 1,
            _ => recorded.unknown += 1,
        }
    }
    Ok(recorded)
}

/// Returns every row run `run_id` still holds in `sending` except those in
/// `keep` (unknown deliveries, results not written yet): a first claim is
/// deleted (the invoice is simply owed again), a retry goes back to `failed`.
///
/// Sweeping by run rather than by a list of claimed ids also returns rows
/// whose claim committed but whose reply never reached us (the database
/// connection broke mid-statement): we never saw them, so we never sent them.
pub async fn hand_back_unattempted(
    pool: &PgPool,
    run_id: i64,
    keep: &[ReminderId],
) -> Result<u64, sqlx::Error> {
    let (deleted, restored): (i64, i64) = sqlx::query_as(
        "WITH deleted AS (
             DELETE FROM reminders
              WHERE run_id = $1 AND status = 'sending' AND attempts = 0 AND id <> ALL($2)
             RETURNING id
         ), restored AS (
             UPDATE reminders SET status = 'failed'
              WHERE run_id = $1 AND status = 'sending' AND attempts > 0 AND id <> ALL($2)
             RETURNING id
         )
         SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM restored)",
    )
    .bind(run_id)
    .bind(keep)
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(deleted + restored).unwrap_or(0))
}
