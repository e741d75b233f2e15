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
//!    tick by an `UPDATE ... WHERE status = 'failed'` (invoice mode: over
//!    rows locked with `FOR UPDATE SKIP LOCKED`; customer mode: in the same
//!    statement as the customer's new steps, so they go out in one mail):
//!    two replicas can never re-claim the same row.
//!    Only while their step is still due: a failed row of a superseded step
//!    becomes `discarded` instead ("superseded by final").
//! 4. **Start is recorded, with the Message-ID.** Just before rows go to
//!    SMTP their `started_at` and the `message_id` their mail carries are
//!    set, a few mails at a time, by an `UPDATE ... WHERE run_id = this run
//!    AND status = 'sending' RETURNING` (`deliveries::mark_started`); only
//!    rows it returns are sent, so every row that may have reached the
//!    server names the Message-ID to look up. Rows never started are returned when the run ends,
//!    or, if its process died, by a later run once its lease is over
//!    (`deliveries`): a first claim is deleted, a retry goes back to `failed`.
//!    The mark and the return are row updates, so they cannot both win.
//! 5. **Unknown stays unknown.** A started row left `sending` by a process
//!    that died mid-send, or whose send ended without a reply, may or may not
//!    have been delivered. We never resend it by ourselves (at-most-once);
//!    `audit` lists it and `resolve` settles it.
//!
//! 6. **Fencing.** With a lock, every claim transaction first advances the
//!    lock's high-water mark in `lock_fences` with its fencing token, and
//!    claims nothing ([`ClaimError::Fenced`]) if a newer holder has already
//!    written: a paused holder that wakes up cannot claim a single row.
//!
//! Claims insert in `invoice_id` order so two concurrent claimers of
//! overlapping batches take the unique-index locks in the same order and
//! cannot deadlock.

use std::collections::HashMap;

use sqlx::{FromRow, PgConnection};

use super::Db;
use super::conn::on_db;
use super::customers::Retries;
use super::invoices::{SourceRow, source_columns};
use super::locks::{Fence, advance_fence};
use super::owing::{
    Today, backoff_over, complete, customer_gap_clear, in_window, invoice_gap_clear, owes_flags,
    windows,
};
use crate::domain::{InvoiceId, ReminderId};

/// Why a claim claimed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// A newer lock holder has already written: this holder is stale.
    #[error("fencing token {token} is older than the newest lock holder's; claim refused")]
    Fenced { token: i64 },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl super::conn::Broken for ClaimError {
    fn broke_connection(&self) -> bool {
        match self {
            Self::Fenced { .. } => false,
            Self::Database(e) => e.broke_connection(),
        }
    }
}

/// With a fence, advances the lock's high-water mark first (or refuses);
/// must run in the claim's transaction.
async fn check_fence(
    c: &mut PgConnection,
    db: &Db,
    fence: Option<Fence<'_>>,
) -> Result<(), ClaimError> {
    if let Some(fence) = fence
        && !advance_fence(c, db, fence).await?
    {
        return Err(ClaimError::Fenced { token: fence.token });
    }
    Ok(())
}

/// Backoff between attempts of one reminder: `first`, doubling per attempt,
/// at most `max` (`owing::backoff_wait!`).
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub first: std::time::Duration,
    pub max: std::time::Duration,
}

/// The Message-IDs of the reminders sent for the invoice of claimed row
/// `$c` (its `invoice_id`) or, in customer mode, to its customer (its
/// `customer_id`: the customer's statements are one thread), oldest first:
/// the first one (the thread's root) and the latest nine, for
/// `In-Reply-To` and `References`. `thread_of!(invoice "c")` reads the
/// invoice's own only (a statement's other rows: its first row reads the
/// customer's). Read in the claim's own statement (no round trip per
/// message), through the unique index's `invoice_id` prefix. Most claimed
/// rows start no thread: an index probe or two decide that first (the
/// list itself, a union of two sorted scans, took 26 µs a row, 13 of a
/// 500-row claim's 31 ms, measured with auto_explain).
macro_rules! thread_of {
    ($c:literal) => {
        thread_of!(any $c)
    };
    ($scope:ident $c:literal) => {
        concat!(
            "CASE WHEN ",
            thread_of!(@none $scope $c),
            " THEN ARRAY[]::text[] ELSE
             ARRAY(SELECT t.message_id FROM (
                 (SELECT p.message_id, p.sent_at, p.id FROM {ir}.reminders p
                   WHERE ",
            thread_of!(@rows $scope $c),
            " AND p.status = 'sent' AND p.message_id IS NOT NULL
                   ORDER BY p.sent_at, p.id LIMIT 1)
                 UNION
                 (SELECT p.message_id, p.sent_at, p.id FROM {ir}.reminders p
                   WHERE ",
            thread_of!(@rows $scope $c),
            " AND p.status = 'sent' AND p.message_id IS NOT NULL
                   ORDER BY p.sent_at DESC, p.id DESC LIMIT 9)) t
              ORDER BY t.sent_at, t.id) END"
        )
    };
    (@rows any $c:literal) => {
        concat!("(p.invoice_id = ", $c, ".invoice_id OR p.customer_id = ", $c, ".customer_id)")
    };
    (@rows invoice $c:literal) => {
        concat!("p.invoice_id = ", $c, ".invoice_id")
    };
    (@none any $c:literal) => {
        concat!(
            thread_of!(@none invoice $c),
            " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders p WHERE p.customer_id = ",
            $c,
            ".customer_id AND p.status = 'sent' AND p.message_id IS NOT NULL)"
        )
    };
    (@none invoice $c:literal) => {
        concat!(
            "NOT EXISTS (SELECT 1 FROM {ir}.reminders p WHERE p.invoice_id = ",
            $c,
            ".invoice_id AND p.status = 'sent' AND p.message_id IS NOT NULL)"
        )
    };
}

/// A row a claim took, with the source row it was claimed from (read in
/// the claim's own statement, unchecked).
#[derive(Debug, Clone, FromRow)]
pub struct ClaimedRow {
    #[sqlx(rename = "reminder_id")]
    pub id: ReminderId,
    /// Delivery attempts finished before this claim (0 for a first claim).
    pub attempts: i32,
    /// The step claimed.
    pub period: String,
    /// The Message-ID its last attempt carried (a retry), stored before
    /// that attempt's send.
    pub message_id: Option<String>,
    /// Message-IDs already sent for the invoice, oldest first (bounded).
    pub thread: Vec<String>,
    #[sqlx(flatten)]
    pub source: SourceRow,
}

/// What one claim statement did: the rows it took, and (never taken) the
/// rows of keys that appear more than once in the source.
#[derive(Debug, Clone, Default)]
pub struct Claim {
    pub claimed: Vec<ClaimedRow>,
    /// Every source row of each repeated key among those asked for.
    pub repeated: Vec<SourceRow>,
}

/// One row of a claim's result: a claimed row (its id, attempts, step and
/// stored Message-ID, and its key as `invoice_id`), or a source row (no
/// reminder id): of an owed key, or (`repeated`) of a key on several rows.
#[derive(FromRow)]
struct ClaimResult {
    reminder_id: Option<ReminderId>,
    attempts: Option<i32>,
    period: Option<String>,
    stored_message_id: Option<String>,
    thread: Option<Vec<String>>,
    repeated: bool,
    #[sqlx(flatten)]
    source: SourceRow,
}

impl Claim {
    /// Pairs each claimed row with its key's one source row. The pairing
    /// is done here, by key, not in SQL: joined in the statement,
    /// PostgreSQL (estimating each side at one row) compared every claimed
    /// row with every owed one (BENCHMARKS.md, "Where the time goes").
    fn from_results(results: Vec<ClaimResult>) -> Self {
        let mut claim = Self::default();
        let mut claimed = Vec::new();
        // Each owed key's one source row, and its thread (read before the
        // insert, so its probes never meet the rows the claim inserts).
        let mut owed: HashMap<InvoiceId, (SourceRow, Vec<String>)> = HashMap::new();
        for r in results {
            match (r.reminder_id, r.attempts, r.period) {
                (Some(id), Some(attempts), Some(period)) => claimed.push((
                    id,
                    attempts,
                    period,
                    r.stored_message_id,
                    r.source.invoice_id,
                )),
                _ if r.repeated => claim.repeated.push(r.source),
                _ => {
                    if let Some(key) = r.source.invoice_id.clone() {
                        owed.insert(key, (r.source, r.thread.unwrap_or_default()));
                    }
                }
            }
        }
        for (id, attempts, period, message_id, key) in claimed {
            // The claim took only keys of `owed`, each on one row.
            if let Some((source, thread)) = key.and_then(|k| owed.get(&k)).cloned() {
                claim.claimed.push(ClaimedRow {
                    id,
                    attempts,
                    period,
                    message_id,
                    thread,
                    source,
                });
            }
        }
        claim
    }
}

/// The tail every claim statement ends with: the claimed rows (`taken`),
/// the owed source rows (`owed`) and the rows of repeated keys (`keyed`).
macro_rules! claim_results {
    () => {
        concat!(
            " SELECT c.id AS reminder_id, c.attempts, c.period, c.message_id AS stored_message_id,",
            " NULL::text[] AS thread, false AS repeated,",
            " c.invoice_id, NULL AS number, NULL::bigint AS amount_minor, NULL::text AS amount_major,",
            " NULL AS currency, NULL::date AS due_date, NULL::text AS due_date_bad, NULL AS payment_url,",
            " NULL AS customer_name, NULL AS customer_email, NULL AS customer_locale,",
            " NULL AS customer_id",
            " FROM taken c",
            " UNION ALL",
            " SELECT NULL, NULL, NULL, NULL, o.thread, false, o.invoice_id, o.number, o.amount_minor,",
            " o.amount_major, o.currency, o.due_date, o.due_date_bad, o.payment_url, o.customer_name, o.customer_email,",
            " o.customer_locale, o.customer_id FROM owed o",
            " UNION ALL",
            " SELECT NULL, NULL, NULL, NULL, NULL, true, ",
            source_columns!(),
            " FROM keyed s WHERE s.copies > 1"
        )
    };
}

/// The source rows of the keys `$keys`, each looked up on its own
/// (`LATERAL`: for the whole batch at once PostgreSQL joined the view's
/// tables by hashing all of the customers, where one index probe per row
/// would do), with how many rows carry each key. The key is matched in the
/// database's own collation (no COLLATE "C"): the lookup index the README
/// asks for is on `(key::text)`, and one in another collation cannot serve
/// it. `OFFSET 0` keeps the other conditions out of that lookup (pushed in,
/// PostgreSQL combined the key index with the due-date index and read the
/// whole window).
macro_rules! keyed {
    () => {
        concat!(
            "keyed AS MATERIALIZED (",
            " SELECT s.*, count(*) OVER (PARTITION BY s.invoice_id::text) AS copies",
            " FROM unnest($keys::text[]) AS k(key)",
            " CROSS JOIN LATERAL (SELECT * FROM {src} s WHERE s.invoice_id::text = k.key OFFSET 0) s)"
        )
    };
}

/// Claims, for run `run_id`, the due step of each of `keys` (distinct
/// invoice keys) that still owes it: unpaid, unpaused, in a window today,
/// not reminded within the gap, a value in every column a reminder needs,
/// and on **exactly one** row of the source; all re-checked in the same
/// statement as the INSERT (one snapshot decides them all), so an invoice
/// paid, paused or claimed by someone else since the scan is not claimed.
/// Returns only the rows this call inserted, each with its one source row,
/// and the rows of keys it found repeated. With a `fence`, the claim
/// commits only if no newer lock holder has written. Inserting in key
/// order keeps two claimers of overlapping batches from deadlocking on the
/// unique index.
pub async fn claim_steps(
    db: &Db,
    keys: &[InvoiceId],
    today: &Today,
    run_id: i64,
    fence: Option<Fence<'_>>,
) -> Result<Claim, ClaimError> {
    let statement = db.statement(concat!(
        "WITH ",
        keyed!(),
        ", owed AS MATERIALIZED (SELECT ",
        thread_of!(invoice "x"),
        " AS thread, x.* FROM (SELECT w.key AS step, ",
        source_columns!(),
        " FROM keyed s JOIN LATERAL (SELECT w.key FROM ",
        windows!(),
        " WHERE ",
        in_window!("s"),
        " LIMIT 1) w ON TRUE",
        " WHERE s.copies = 1 AND ",
        complete!(),
        " AND ",
        owes_flags!("s"),
        " AND ",
        invoice_gap_clear!(probe),
        ") x), taken AS (INSERT INTO {ir}.reminders (invoice_id, period, status, run_id, fence_token, customer_id)",
        " SELECT o.invoice_id, o.step, 'sending', $run_id, $fence, o.customer_id FROM owed o",
        " ORDER BY o.invoice_id ON CONFLICT (invoice_id, period) DO NOTHING",
        " RETURNING id, invoice_id, attempts, period, message_id)",
        claim_results!()
    ));
    let token = fence.map(|f| f.token);
    let params = today
        .params()
        .with("keys", &keys)
        .with("run_id", &run_id)
        .with("fence", &token);
    let results: Vec<ClaimResult> = on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        sqlx::query_as_with(statement.sql(), statement.args(&params)?)
            .persistent(db.named())
            .fetch_all(&mut *c)
            .await
            .map_err(ClaimError::from)
    })?;
    Ok(Claim::from_results(results))
}

/// What a customer-mode claim takes: whole customers' rows, new steps and
/// due retries alike, for one statement each.
#[derive(Debug, Clone, Default)]
pub struct StatementClaim {
    /// Every key asked for (new and retried), distinct.
    pub keys: Vec<InvoiceId>,
    /// The `failed` rows to retry, and their keys.
    pub retries: Vec<ReminderId>,
    pub retry_keys: Vec<InvoiceId>,
    /// Of those, the keys of resends of unknown mails (an operator's
    /// `resolve --resend`): not held back by the customer gap.
    pub resend_keys: Vec<InvoiceId>,
    /// The customers of the claim (their gap is re-checked under a lock
    /// of each, so two claimers cannot both mail one customer).
    pub customers: Vec<String>,
    /// The customers whose statement leaves owed invoices for the next
    /// tick (`reminders.continued`).
    pub continued: Vec<String>,
}

/// Customer mode: claims the rows of `claim` for run `run_id`, new steps
/// inserted and due retries taken back from `failed`, in one statement
/// that re-checks everything [`claim_steps`] does and the customer gap
/// (but for the resend of an unknown mail, which the customer never got),
/// after taking a transaction-level lock on each customer (in one order,
/// so two claimers cannot deadlock): of two claimers of one customer, the
/// second sees the first's rows and leaves the customer alone.
pub async fn claim_statements(
    db: &Db,
    claim: &StatementClaim,
    today: &Today,
    retries: &Retries,
    fence: Option<Fence<'_>>,
) -> Result<Claim, ClaimError> {
    let locks = db.statement(
        "SELECT count(pg_advisory_xact_lock(1229148276, h)) FROM (SELECT DISTINCT hashtext(c) AS h
           FROM unnest($customers::text[]) AS c ORDER BY 1) x",
    );
    let statement = db.statement(concat!(
        "WITH ",
        keyed!(),
        ", owed AS MATERIALIZED (SELECT CASE WHEN x.nth = 1 THEN ",
        thread_of!("x"),
        " ELSE ",
        thread_of!(invoice "x"),
        " END AS thread, x.* FROM (SELECT w.key AS step, ",
        source_columns!(),
        ", row_number() OVER (PARTITION BY s.customer_id::text) AS nth",
        " FROM keyed s JOIN LATERAL (SELECT w.key FROM ",
        windows!(),
        " WHERE ",
        in_window!("s"),
        " LIMIT 1) w ON TRUE",
        " WHERE s.copies = 1 AND ",
        complete!(),
        " AND ",
        owes_flags!("s"),
        " AND ",
        invoice_gap_clear!(probe),
        " AND (",
        customer_gap_clear!(),
        " OR s.invoice_id::text = ANY($resend_keys))",
        ") x), inserted AS (INSERT INTO {ir}.reminders",
        " (invoice_id, period, status, run_id, fence_token, customer_id, continued)",
        " SELECT o.invoice_id, o.step, 'sending', $run_id, $fence, o.customer_id,",
        " o.customer_id = ANY($continued) FROM owed o",
        " WHERE NOT (o.invoice_id = ANY($retry_keys))",
        " ORDER BY o.invoice_id ON CONFLICT (invoice_id, period) DO NOTHING",
        " RETURNING id, invoice_id, attempts, period, message_id),",
        " retried AS (UPDATE {ir}.reminders r SET status = 'sending', run_id = $run_id,",
        " claimed_at = now(), fence_token = $fence, started_at = NULL,",
        " continued = o.customer_id = ANY($continued)",
        " FROM owed o WHERE r.id = ANY($retries) AND r.invoice_id = o.invoice_id AND r.period = o.step",
        " AND r.status = 'failed' AND r.attempts < $max_attempts AND r.run_id IS DISTINCT FROM $run_id",
        " AND ",
        backoff_over!(),
        " RETURNING r.id, r.invoice_id, r.attempts, r.period, r.message_id),",
        " taken AS (SELECT * FROM inserted UNION ALL SELECT * FROM retried)",
        claim_results!()
    ));
    let token = fence.map(|f| f.token);
    let params = today
        .params()
        .and(retries.params())
        .with("keys", &claim.keys)
        .with("retries", &claim.retries)
        .with("retry_keys", &claim.retry_keys)
        .with("resend_keys", &claim.resend_keys)
        .with("customers", &claim.customers)
        .with("continued", &claim.continued)
        .with("fence", &token);
    let results: Vec<ClaimResult> = on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        sqlx::query_with(locks.sql(), locks.args(&params)?)
            .persistent(db.named())
            .execute(&mut *c)
            .await?;
        sqlx::query_as_with(statement.sql(), statement.args(&params)?)
            .persistent(db.named())
            .fetch_all(&mut *c)
            .await
            .map_err(ClaimError::from)
    })?;
    Ok(Claim::from_results(results))
}

/// Invoice mode: re-claims up to `limit` `failed` reminders whose step is
/// still their invoice's due step, with attempts left and their backoff
/// over, for invoices that still owe a reminder, are on exactly one source
/// row and have a value in every column a reminder needs. Rows this run
/// already tried are skipped, so each row gets at most one attempt per
/// tick.
pub async fn reclaim_failed(
    db: &Db,
    today: &Today,
    retries: &Retries,
    limit: u32,
    fence: Option<Fence<'_>>,
) -> Result<Vec<ClaimedRow>, ClaimError> {
    let statement = db.statement(concat!(
        "WITH picked AS (SELECT r.id FROM {ir}.reminders r",
        " JOIN {src} s ON s.invoice_id::text = r.invoice_id",
        " JOIN ",
        windows!(),
        " ON w.key = r.period AND ",
        in_window!("s"),
        " WHERE r.status = 'failed' AND r.attempts < $max_attempts",
        " AND r.run_id IS DISTINCT FROM $run_id AND ",
        backoff_over!(),
        " AND ",
        complete!(),
        " AND (SELECT count(*) FROM {src} k WHERE k.invoice_id::text = r.invoice_id) = 1 AND ",
        owes_flags!("s"),
        " AND ",
        invoice_gap_clear!(probe),
        " ORDER BY r.id LIMIT $limit FOR UPDATE OF r SKIP LOCKED),",
        " claimed AS (UPDATE {ir}.reminders r SET status = 'sending', run_id = $run_id,",
        " claimed_at = now(), fence_token = $fence, started_at = NULL",
        " FROM picked WHERE r.id = picked.id AND r.status = 'failed'",
        " RETURNING r.id, r.invoice_id, r.attempts, r.period, r.customer_id, r.message_id)",
        " SELECT c.id AS reminder_id, c.attempts, c.period, c.message_id, ",
        thread_of!("c"),
        " AS thread, ",
        source_columns!(),
        " FROM claimed c JOIN {src} s ON s.invoice_id::text = c.invoice_id",
        " ORDER BY c.invoice_id"
    ));
    let token = fence.map(|f| f.token);
    let limit = i64::from(limit);
    let params = today
        .params()
        .and(retries.params())
        .with("limit", &limit)
        .with("fence", &token);
    on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        sqlx::query_as_with(statement.sql(), statement.args(&params)?)
            .persistent(db.named())
            .fetch_all(&mut *c)
            .await
            .map_err(ClaimError::from)
    })
}

/// A step recorded `skipped` because it can no longer be sent within its
/// window: the gap holds it back past the window's last day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superseded {
    pub invoice_id: InvoiceId,
    pub step: String,
    /// Customer mode: the invoice's customer.
    pub customer_id: Option<String>,
    /// Why, in words (`last_error` of the row).
    pub reason: String,
}

/// Records `steps` `skipped` (each step of its invoice at most once, under
/// UNIQUE (invoice_id, period); a key on several source rows never), for
/// run `run_id`; with a `fence`, only if no newer lock holder has written.
/// Returns how many were recorded.
pub async fn record_superseded(
    db: &Db,
    steps: &[Superseded],
    run_id: i64,
    fence: Option<Fence<'_>>,
) -> Result<u64, ClaimError> {
    let keys: Vec<&str> = steps.iter().map(|s| s.invoice_id.as_str()).collect();
    let periods: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
    let customers: Vec<Option<&str>> = steps.iter().map(|s| s.customer_id.as_deref()).collect();
    let reasons: Vec<&str> = steps.iter().map(|s| s.reason.as_str()).collect();
    let token = fence.map(|f| f.token);
    on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        sqlx::query(db.sql(
            "INSERT INTO {ir}.reminders (invoice_id, period, status, run_id, fence_token, customer_id, last_error)
             SELECT u.k, u.p, 'skipped', $5, $6, u.c, u.e
               FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(k, p, c, e)
              WHERE (SELECT count(*) FROM {src} s WHERE s.invoice_id::text = u.k) = 1
              ORDER BY u.k
             ON CONFLICT (invoice_id, period) DO NOTHING",
        ))
        .persistent(db.named())
        .bind(&keys)
        .bind(&periods)
        .bind(&customers)
        .bind(&reasons)
        .bind(run_id)
        .bind(token)
        .execute(&mut *c)
        .await
        .map(|done| done.rows_affected())
        .map_err(ClaimError::from)
    })
}
