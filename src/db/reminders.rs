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
//! 4. **Start is recorded.** Just before rows go to SMTP their `started_at`
//!    is set, a few at a time, by an `UPDATE ... WHERE run_id = this run AND
//!    status = 'sending' RETURNING` (`deliveries::mark_started`); only rows it
//!    returns are sent. Rows never started are returned when the run ends,
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
use super::invoices::{Owed, SourceRow, bind_owed, owed_conditions, source_columns, window_arrays};
use super::locks::{Fence, advance_fence};
use crate::domain::{InvoiceId, ReminderId};
use crate::stages::Window;

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
/// at most `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub first: std::time::Duration,
    pub max: std::time::Duration,
}

/// SQL: the wait after the last attempt of the `failed` row `r`, with the
/// first wait (seconds) in parameter `$first` and the longest in `$max`:
/// [`Backoff`], doubling per attempt made. Capped in seconds before it
/// becomes an interval (and the exponent at 62), so any attempt count
/// gives at most `$max`: an interval of `$first * 2^35` seconds and more
/// overflows and wraps negative.
macro_rules! backoff_wait {
    ($first:literal, $max:literal) => {
        concat!(
            "make_interval(secs => LEAST(",
            $first,
            " * power(2, LEAST(GREATEST(r.attempts - 1, 0), 62)), ",
            $max,
            "))"
        )
    };
}
pub(crate) use backoff_wait;

/// SQL: the `failed` row `r` may be tried again now: it was never
/// attempted, or its [`backoff_wait!`] is over (database clock, `now()`).
macro_rules! backoff_over {
    ($first:literal, $max:literal) => {
        concat!(
            "(r.last_attempt_at IS NULL OR r.last_attempt_at <= now() - ",
            $crate::db::reminders::backoff_wait!($first, $max),
            ")"
        )
    };
}
pub(crate) use backoff_over;

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

/// One row of a claim's result: a claimed row (its id, attempts and
/// step, and its key as `invoice_id`), or a source row (no reminder id):
/// of an owed key, or (`repeated`) of a key on several rows.
#[derive(FromRow)]
struct ClaimResult {
    reminder_id: Option<ReminderId>,
    attempts: Option<i32>,
    period: Option<String>,
    thread: Option<Vec<String>>,
    repeated: bool,
    #[sqlx(flatten)]
    source: SourceRow,
}

impl Claim {
    /// Pairs each claimed row with its key's one source row. The pairing
    /// is done here, by key, not in SQL: joined in the statement,
    /// PostgreSQL (estimating each side at one row) compared every claimed
    /// row with every owed one, 250,000 comparisons a claim (20 ms of its
    /// 28, measured).
    fn from_results(results: Vec<ClaimResult>) -> Self {
        let mut claim = Self::default();
        let mut claimed = Vec::new();
        // Each owed key's one source row, and its thread (read before the
        // insert, so its probes never meet the rows the claim inserts).
        let mut owed: HashMap<InvoiceId, (SourceRow, Vec<String>)> = HashMap::new();
        for r in results {
            match (r.reminder_id, r.attempts, r.period) {
                (Some(id), Some(attempts), Some(period)) => {
                    claimed.push((id, attempts, period, r.source.invoice_id))
                }
                _ if r.repeated => claim.repeated.push(r.source),
                _ => {
                    if let Some(key) = r.source.invoice_id.clone() {
                        owed.insert(key, (r.source, r.thread.unwrap_or_default()));
                    }
                }
            }
        }
        for (id, attempts, period, key) in claimed {
            // The claim inserted only keys of `owed`, each on one row.
            if let Some((source, thread)) = key.and_then(|k| owed.get(&k)).cloned() {
                claim.claimed.push(ClaimedRow {
                    id,
                    attempts,
                    period,
                    thread,
                    source,
                });
            }
        }
        claim
    }
}

/// Claims the step of `window` for `invoice_ids` for run `run_id`,
/// re-checking in the same statement that each invoice is still unpaid,
/// unpaused, in the window, not reminded within the gap, has a value in
/// every column a reminder needs, and is on **exactly one** row of the
/// source. Returns only the rows this call inserted, each with its one
/// source row, and the rows of keys it found repeated. With a `fence`, the
/// claim commits only if no newer lock holder has written.
pub async fn claim_batch(
    db: &Db,
    invoice_ids: &[InvoiceId],
    window: &Window,
    owed: Owed<'_>,
    run_id: i64,
    fence: Option<Fence<'_>>,
) -> Result<Claim, ClaimError> {
    claim_steps(
        db,
        invoice_ids,
        std::slice::from_ref(window),
        owed,
        run_id,
        fence,
    )
    .await
}

/// [`claim_batch`] over several steps at once: each invoice is claimed for
/// the step whose window (one of `windows`, which never overlap) holds its
/// due date now. Customer mode claims the invoices of a few customers,
/// whatever steps they owe, in this one statement (one instead of one per
/// step).
pub async fn claim_steps(
    db: &Db,
    invoice_ids: &[InvoiceId],
    windows: &[Window],
    owed: Owed<'_>,
    run_id: i64,
    fence: Option<Fence<'_>>,
) -> Result<Claim, ClaimError> {
    claim_rows(db, invoice_ids, windows, owed, run_id, fence, false).await
}

/// [`claim_steps`], with the rows it inserts **marked started** in the same
/// statement (`started_at`, `last_attempt_at`), so they need no mark of
/// their own (customer mode: the claim of a few whole customers is its
/// letters' mark). The caller must hold room in the mark window for every
/// letter the claim may make before it calls this, and un-mark
/// ([`super::deliveries::unmark`]) any row it then does not send.
pub async fn claim_steps_started(
    db: &Db,
    invoice_ids: &[InvoiceId],
    windows: &[Window],
    owed: Owed<'_>,
    run_id: i64,
    fence: Option<Fence<'_>>,
) -> Result<Claim, ClaimError> {
    claim_rows(db, invoice_ids, windows, owed, run_id, fence, true).await
}

async fn claim_rows(
    db: &Db,
    invoice_ids: &[InvoiceId],
    windows: &[Window],
    owed: Owed<'_>,
    run_id: i64,
    fence: Option<Fence<'_>>,
    started: bool,
) -> Result<Claim, ClaimError> {
    let (steps, due_froms, due_tos) = window_arrays(windows);
    // The source is read once (`keyed`), in the same statement as the
    // INSERT: an invoice paid, paused or claimed by someone else since the
    // scan is not claimed, and a key that now has two rows is not either
    // (the statement's one snapshot decides both). Inserting in key order
    // keeps two claimers of overlapping batches from deadlocking on the
    // unique index. The key is matched in the database's own collation (no
    // COLLATE "C"): the lookup index the README asks for is on
    // `(key::text)`, and one in another collation cannot serve it
    // (measured: a sequential scan of the invoices per claim, 1.3 s at
    // 100k). `OFFSET 0` keeps the other conditions out of that lookup:
    // pushed into it, PostgreSQL combined the key index with the due-date
    // index (a bitmap AND reading the whole window, 40-65 ms a claim at
    // 100k, measured) instead of 500 lookups. Each key is looked up on its
    // own (`LATERAL`): for the whole batch at once PostgreSQL joined the
    // view's tables by hashing all of `customers` (a sequential scan of 20k
    // customers, 6.9 of a 320-row claim's 19.6 ms, measured with
    // auto_explain) where one index probe per row would do.
    let sql = db.sql(concat!(
        "WITH keyed AS MATERIALIZED (
             SELECT s.*, count(*) OVER (PARTITION BY s.invoice_id::text) AS copies
               FROM unnest($4::text[]) AS k(key)
              CROSS JOIN LATERAL (SELECT * FROM {src} s WHERE s.invoice_id::text = k.key OFFSET 0) s
         ), owed AS MATERIALIZED (
             SELECT CASE WHEN x.nth = 1 THEN ",
        thread_of!("x"),
        " ELSE ",
        thread_of!(invoice "x"),
        " END AS thread, false AS repeated, x.invoice_id, x.number, x.amount_minor, x.amount_major,
                    x.currency, x.due_date, x.payment_url, x.customer_name, x.customer_email,
                    x.customer_locale, x.customer_id
               FROM (SELECT ",
        source_columns!(),
        ", row_number() OVER (PARTITION BY {customer}) AS nth
                       FROM keyed s
                      WHERE s.copies = 1
                        AND EXISTS (SELECT 1 FROM unnest($8::date[], $9::date[]) AS w(due_from, due_to)
                                     WHERE s.due_date >= COALESCE(w.due_from, '-infinity'::date) AND s.due_date <= w.due_to)
                        AND s.email IS NOT NULL AND s.currency IS NOT NULL AND {amount_value} IS NOT NULL",
        owed_conditions!(),
        ") x
         ), claimed AS (
             INSERT INTO {ir}.reminders (invoice_id, period, status, run_id, fence_token, customer_id,
                                         started_at, last_attempt_at)
             SELECT o.invoice_id, w.step, 'sending', $6, $7, o.customer_id,
                    CASE WHEN $10 THEN now() END, CASE WHEN $10 THEN now() END
               FROM owed o
               JOIN unnest($5::text[], $8::date[], $9::date[]) AS w(step, due_from, due_to)
                 ON o.due_date >= COALESCE(w.due_from, '-infinity'::date) AND o.due_date <= w.due_to
              ORDER BY o.invoice_id
             ON CONFLICT (invoice_id, period) DO NOTHING
             RETURNING id, invoice_id, attempts, period, customer_id
         )
         SELECT c.id AS reminder_id, c.attempts, c.period, NULL::text[] AS thread, false AS repeated,
                c.invoice_id, NULL AS number, NULL::bigint AS amount_minor, NULL::text AS amount_major,
                NULL AS currency, NULL::date AS due_date, NULL AS payment_url,
                NULL AS customer_name, NULL AS customer_email, NULL AS customer_locale,
                NULL AS customer_id
           FROM claimed c
         UNION ALL
         SELECT NULL, NULL, NULL, o.* FROM owed o
         UNION ALL
         SELECT NULL, NULL, NULL, NULL, true, ",
        source_columns!(),
        " FROM keyed s WHERE s.copies > 1"
    ));
    let results: Vec<ClaimResult> = on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        bind_owed!(sqlx::query_as(sql).persistent(db.named()), owed)
            .bind(invoice_ids)
            .bind(&steps)
            .bind(run_id)
            .bind(fence.map(|f| f.token))
            .bind(&due_froms)
            .bind(&due_tos)
            .bind(started)
            .fetch_all(&mut *c)
            .await
            .map_err(ClaimError::from)
    })?;
    Ok(Claim::from_results(results))
}

/// Re-claims up to `limit` `failed` reminders whose step is still their
/// invoice's due step (one of `windows`), with attempts left and their
/// backoff over, for invoices that still owe a reminder, are on exactly
/// one source row and have a value in every column a reminder needs.
/// Rows this run already tried are skipped, so each row gets at most one
/// attempt per tick.
#[allow(clippy::too_many_arguments)]
pub async fn reclaim_failed(
    db: &Db,
    windows: &[Window],
    owed: Owed<'_>,
    run_id: i64,
    max_attempts: u32,
    backoff: Backoff,
    limit: u32,
    fence: Option<Fence<'_>>,
) -> Result<Vec<ClaimedRow>, ClaimError> {
    let (keys, froms, tos) = window_arrays(windows);
    let sql = db.sql(concat!(
        "WITH picked AS (
             SELECT r.id
               FROM {ir}.reminders r
               JOIN {src} s ON s.invoice_id::text = r.invoice_id
               JOIN unnest($4::text[], $5::date[], $6::date[]) AS w(key, due_from, due_to)
                 ON w.key = r.period
                AND s.due_date >= COALESCE(w.due_from, '-infinity'::date) AND s.due_date <= w.due_to
              WHERE r.status = 'failed'
                AND r.attempts < $7
                AND r.run_id IS DISTINCT FROM $8
                AND ",
        backoff_over!("$11", "$12"),
        "
                AND s.email IS NOT NULL AND s.currency IS NOT NULL AND {amount_value} IS NOT NULL
                AND (SELECT count(*) FROM {src} k WHERE k.invoice_id::text = r.invoice_id) = 1",
        owed_conditions!(),
        "
              ORDER BY r.id
              LIMIT $9
                FOR UPDATE OF r SKIP LOCKED
         ), claimed AS (
             UPDATE {ir}.reminders r
                SET status = 'sending', run_id = $8, claimed_at = now(), fence_token = $10,
                    started_at = NULL
               FROM picked
              WHERE r.id = picked.id AND r.status = 'failed'
             RETURNING r.id, r.invoice_id, r.attempts, r.period, r.customer_id
         )
         SELECT c.id AS reminder_id, c.attempts, c.period, ",
        thread_of!("c"),
        " AS thread, ",
        source_columns!(),
        " FROM claimed c JOIN {src} s ON s.invoice_id::text = c.invoice_id
          ORDER BY c.invoice_id"
    ));
    on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        bind_owed!(sqlx::query_as(sql).persistent(db.named()), owed)
            .bind(&keys)
            .bind(&froms)
            .bind(&tos)
            .bind(i64::from(max_attempts))
            .bind(run_id)
            .bind(i64::from(limit))
            .bind(fence.map(|f| f.token))
            .bind(backoff.first.as_secs_f64())
            .bind(backoff.max.as_secs_f64())
            .fetch_all(&mut *c)
            .await
            .map_err(ClaimError::from)
    })
}
