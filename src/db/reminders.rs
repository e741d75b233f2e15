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
//!    (`returned`): a first claim is deleted, a retry goes back to `failed`.
//!    The mark and the return are row updates, so they cannot both win.
//! 5. **Unknown stays unknown.** A started row left `sending` by a process
//!    that died mid-send, or whose send ended without a reply, may or may not
//!    have been delivered. We never resend it by ourselves (at-most-once);
//!    `audit` lists it and `settle` settles it.
//!
//! 6. **Fencing.** With a lock, every claim transaction first advances the
//!    lock's high-water mark in `lock_fences` with its fencing token, and
//!    claims nothing ([`ClaimError::Fenced`]) if a newer holder has already
//!    written: a paused holder that wakes up cannot claim a single row.
//!
//! Claims insert in `invoice_id` order so two concurrent claimers of
//! overlapping batches take the unique-index locks in the same order and
//! cannot deadlock.

use std::collections::{HashMap, HashSet};

use sqlx::{FromRow, PgConnection};

use super::Db;
use super::locks::{Fence, advance_fence};
use super::source_row::SourceRow;
use crate::domain::StepKey;
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
pub(super) async fn check_fence(
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

/// Asks, on `c` (the claim's transaction), which of `claim`'s rows'
/// addresses are suppressed.
pub(super) async fn ask_suppressed(
    c: &mut PgConnection,
    db: &Db,
    mut claim: Claim,
) -> Result<Claim, ClaimError> {
    let asked = crate::domain::lowercase_addresses(
        claim
            .claimed
            .iter()
            .filter_map(|r| r.source.customer_email.as_deref()),
    );
    claim.suppressed = super::suppressions::suppressed_among_on(c, db, &asked)
        .await?
        .into_iter()
        .collect();
    Ok(claim)
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
/// message), from the invoice's (and the customer's) reminders alone
/// (`owing::reminders_of!`); most claimed rows start no thread, which one
/// lookup decides before the list is made.
macro_rules! thread_of {
    ($c:literal) => {
        $crate::db::reminders::thread_of!(any $c)
    };
    ($scope:ident $c:literal) => {
        concat!(
            "CASE WHEN NOT EXISTS (SELECT 1 FROM ",
            $crate::db::reminders::thread_of!(@rows $scope $c),
            " p WHERE p.status = 'sent' AND p.message_id IS NOT NULL) THEN ARRAY[]::text[] ELSE
             ARRAY(SELECT t.message_id FROM (
                 (SELECT p.message_id, p.sent_at, p.id FROM ",
            $crate::db::reminders::thread_of!(@rows $scope $c),
            " p WHERE p.status = 'sent' AND p.message_id IS NOT NULL
                   ORDER BY p.sent_at, p.id LIMIT 1)
                 UNION
                 (SELECT p.message_id, p.sent_at, p.id FROM ",
            $crate::db::reminders::thread_of!(@rows $scope $c),
            " p WHERE p.status = 'sent' AND p.message_id IS NOT NULL
                   ORDER BY p.sent_at DESC, p.id DESC LIMIT 9)) t
              ORDER BY t.sent_at, t.id) END"
        )
    };
    (@rows any $c:literal) => {
        concat!(
            "(SELECT * FROM ",
            $crate::db::owing::reminders_of!(invoice $c, ".invoice_id"),
            " i UNION ALL SELECT * FROM ",
            $crate::db::owing::reminders_of!(customer $c, ".customer_id"),
            " k WHERE k.invoice_id <> ",
            $c,
            ".invoice_id)"
        )
    };
    (@rows invoice $c:literal) => {
        $crate::db::owing::reminders_of!(invoice $c, ".invoice_id")
    };
}
pub(crate) use thread_of;

/// A row a claim took, with the source row it was claimed from (read in
/// the claim's own statement, unchecked).
#[derive(Debug, Clone, FromRow)]
pub struct ClaimedRow {
    #[sqlx(rename = "reminder_id")]
    pub id: ReminderId,
    /// Delivery attempts finished before this claim (0 for a first claim).
    pub attempts: i32,
    /// The step claimed (column `period`).
    #[sqlx(rename = "period")]
    pub step: StepKey,
    /// The Message-ID its last attempt carried (a retry), stored before
    /// that attempt's send.
    pub message_id: Option<String>,
    /// Message-IDs already sent for the invoice, oldest first (bounded).
    pub thread: Vec<String>,
    #[sqlx(flatten)]
    pub source: SourceRow,
}

/// What one claim did: the rows it took, (never taken) the rows of keys
/// that appear more than once in the source, and which of the taken rows'
/// addresses are on the suppression list, read in the claim's own
/// transaction (one commit for both).
#[derive(Debug, Clone, Default)]
pub struct Claim {
    pub claimed: Vec<ClaimedRow>,
    /// Every source row of each repeated key among those asked for.
    pub repeated: Vec<SourceRow>,
    /// The claimed rows' addresses on the suppression list, lower-cased.
    pub suppressed: HashSet<String>,
}

/// One row of a claim's result: a claimed row (its id, attempts, step and
/// stored Message-ID, and its key as `invoice_id`), or a source row (no
/// reminder id): of an owed key, or (`repeated`) of a key on several rows.
#[derive(FromRow)]
pub(super) struct ClaimResult {
    reminder_id: Option<ReminderId>,
    attempts: Option<i32>,
    #[sqlx(rename = "period")]
    step: Option<StepKey>,
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
    /// row with every owed one (BENCHMARKS.md, "Where a customer-mode tick's
    /// time goes").
    pub(super) fn from_results(results: Vec<ClaimResult>) -> Self {
        let mut claim = Self::default();
        let mut claimed = Vec::new();
        // Each owed key's one source row, and its thread (read before the
        // insert, so its probes never meet the rows the claim inserts).
        let mut owed: HashMap<InvoiceId, (SourceRow, Vec<String>)> = HashMap::new();
        for r in results {
            match (r.reminder_id, r.attempts, r.step) {
                (Some(id), Some(attempts), Some(step)) => {
                    claimed.push((id, attempts, step, r.stored_message_id, r.source.invoice_id))
                }
                _ if r.repeated => claim.repeated.push(r.source),
                _ => {
                    if let Some(key) = r.source.invoice_id.clone() {
                        owed.insert(key, (r.source, r.thread.unwrap_or_default()));
                    }
                }
            }
        }
        for (id, attempts, step, message_id, key) in claimed {
            // The claim took only keys of `owed`, each on one row.
            if let Some((source, thread)) = key.and_then(|k| owed.get(&k)).cloned() {
                claim.claimed.push(ClaimedRow {
                    id,
                    attempts,
                    step,
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
            " NULL AS customer_id, NULL AS late_payment_regime,",
            " NULL::text AS timezone, NULL::text AS holiday_calendar",
            " FROM taken c",
            " UNION ALL",
            " SELECT NULL, NULL, NULL, NULL, o.thread, false, o.invoice_id, o.number, o.amount_minor,",
            " o.amount_major, o.currency, o.due_date, o.due_date_bad, o.payment_url, o.customer_name, o.customer_email,",
            " o.customer_locale, o.customer_id, o.late_payment_regime,",
            " o.timezone, o.holiday_calendar FROM owed o",
            " UNION ALL",
            " SELECT NULL, NULL, NULL, NULL, NULL, true, ",
            $crate::db::source_row::source_columns!(),
            " FROM keyed s WHERE s.copies > 1"
        )
    };
}
pub(crate) use claim_results;

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
pub(crate) use keyed;
