//! The claim statements (the protocol they keep is `reminders`): new steps
//! inserted under UNIQUE (invoice_id, period) and `failed` rows taken back,
//! each re-checking in its own statement everything the page said, with the
//! fence first; and steps recorded `skipped` as superseded.

use super::Db;
use super::conn::on_db;
use super::customers::Retries;
use super::invoices::{OverdueKey, OwedPage, owed_page_on};
use super::locks::Fence;
use super::owing::{
    OwingDay, backoff_over, claimable, complete, customer_gap_clear, in_window, invoice_gap_clear,
    owes_flags, priced, windows,
};
use super::reminders::{
    Claim, ClaimError, ClaimResult, ClaimedRow, ask_suppressed, check_fence, claim_results, keyed,
    thread_of,
};
use super::source_row::source_columns;
use crate::domain::StepKey;
use crate::domain::{InvoiceId, ReminderId};
use crate::stages::Window;

/// The rows of `keyed` (the source rows of the keys asked for) that owe
/// their due step today, joined to it as `w.key`: on one source row, a
/// value in every column a reminder needs, unpaid and unpaused, and not
/// reminded within the gap. Both claims select their owed rows by it.
macro_rules! owed_of_keyed {
    () => {
        concat!(
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
            priced!("w.key"),
            " AND ",
            claimable!(),
            " AND ",
            invoice_gap_clear!(probe)
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
    today: &OwingDay,
    run_id: i64,
    fence: Option<Fence<'_>>,
) -> Result<Claim, ClaimError> {
    on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        claim_steps_on(c, db, keys, today, run_id, fence.map(|f| f.token)).await
    })
}

/// [`claim_steps`] on `c`, in a transaction whose fence was checked.
async fn claim_steps_on(
    c: &mut sqlx::PgConnection,
    db: &Db,
    keys: &[InvoiceId],
    today: &OwingDay,
    run_id: i64,
    token: Option<i64>,
) -> Result<Claim, ClaimError> {
    let statement = db.statement(concat!(
        "WITH ",
        keyed!(),
        ", owed AS MATERIALIZED (SELECT ",
        thread_of!(invoice "x"),
        " AS thread, x.* FROM (SELECT w.key AS step, ",
        source_columns!(),
        owed_of_keyed!(),
        ") x), taken AS (INSERT INTO {ir}.reminders (invoice_id, period, status, run_id, fence_token, customer_id)",
        " SELECT o.invoice_id, o.step, 'sending', $run_id, $fence, o.customer_id FROM owed o",
        " ORDER BY o.invoice_id ON CONFLICT (invoice_id, period) DO NOTHING",
        " RETURNING id, invoice_id, attempts, period, message_id)",
        claim_results!()
    ));
    let params = today
        .params()
        .with("keys", &keys)
        .with("run_id", &run_id)
        .with("fence", &token);
    let results: Vec<ClaimResult> = statement.fetch_all(&mut *c, &params).await?;
    ask_suppressed(c, db, Claim::from_results(results)).await
}

/// What the claimer chose from one page of the scan: the keys to claim
/// (distinct) and the steps to record superseded.
#[derive(Debug, Default)]
pub struct PageChoice {
    pub keys: Vec<InvoiceId>,
    pub superseded: Vec<Superseded>,
}

/// What [`claim_page`] did.
#[derive(Debug, Default)]
pub struct PageClaim {
    /// The last row the page examined: the next page starts after it.
    pub last: Option<OverdueKey>,
    /// How many rows the page examined.
    pub examined: usize,
    /// How many keys the claim asked for.
    pub asked: usize,
    /// How many steps were recorded superseded.
    pub superseded: u64,
    pub claim: Claim,
}

/// Invoice mode, one transaction per page: reads the page of `window`
/// after `after` (`invoices::fetch_owed_page`), lets `choose` decide from
/// it, records the steps it found superseded ([`record_superseded`]) and
/// claims the keys it chose ([`claim_steps`]), with the fence checked once
/// before all of it. One commit for what were four.
#[allow(clippy::too_many_arguments)]
pub async fn claim_page(
    db: &Db,
    window: &Window,
    today: &OwingDay,
    after: Option<OverdueKey>,
    limit: u32,
    run_id: i64,
    fence: Option<Fence<'_>>,
    choose: impl FnOnce(OwedPage) -> PageChoice,
) -> Result<PageClaim, ClaimError> {
    let token = fence.map(|f| f.token);
    on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        let page = owed_page_on(c, db, window, today, after, limit).await?;
        let mut done = PageClaim {
            last: page.last.clone(),
            examined: page.examined,
            ..PageClaim::default()
        };
        let chosen = choose(page);
        done.asked = chosen.keys.len();
        if !chosen.superseded.is_empty() {
            done.superseded =
                record_superseded_on(c, db, &chosen.superseded, run_id, token).await?;
        }
        if !chosen.keys.is_empty() {
            done.claim = claim_steps_on(c, db, &chosen.keys, today, run_id, token).await?;
        }
        Ok::<_, ClaimError>(done)
    })
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
    /// `settle --resend`): not kept back by the customer gap.
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
    today: &OwingDay,
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
        owed_of_keyed!(),
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
    on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        locks.execute(&mut *c, &params).await?;
        let results: Vec<ClaimResult> = statement.fetch_all(&mut *c, &params).await?;
        ask_suppressed(c, db, Claim::from_results(results)).await
    })
}

/// Invoice mode: re-claims up to `limit` `failed` reminders whose step is
/// still their invoice's due step, with attempts left and their backoff
/// over, for invoices that still owe a reminder, are on exactly one source
/// row and have a value in every column a reminder needs. Rows this run
/// already tried are skipped, so each row gets at most one attempt per
/// tick. The rows come back as a [`Claim`] (with their suppressed
/// addresses), never with repeated keys.
pub async fn reclaim_failed(
    db: &Db,
    today: &OwingDay,
    retries: &Retries,
    limit: u32,
    fence: Option<Fence<'_>>,
) -> Result<Claim, ClaimError> {
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
        priced!("w.key"),
        " AND ",
        claimable!(),
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
        let claimed: Vec<ClaimedRow> = statement.fetch_all(&mut *c, &params).await?;
        let claim = Claim {
            claimed,
            ..Claim::default()
        };
        ask_suppressed(c, db, claim).await
    })
}

/// A step recorded `skipped` because it can no longer be sent within its
/// window: the gap keeps it back past the window's last day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superseded {
    pub invoice_id: InvoiceId,
    pub step: StepKey,
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
    on_db!(db, tx, |c| {
        check_fence(c, db, fence).await?;
        record_superseded_on(c, db, steps, run_id, fence.map(|f| f.token)).await
    })
}

/// [`record_superseded`] on `c`, in a transaction whose fence was checked.
async fn record_superseded_on(
    c: &mut sqlx::PgConnection,
    db: &Db,
    steps: &[Superseded],
    run_id: i64,
    token: Option<i64>,
) -> Result<u64, ClaimError> {
    let keys: Vec<&str> = steps.iter().map(|s| s.invoice_id.as_str()).collect();
    let periods: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
    let customers: Vec<Option<&str>> = steps.iter().map(|s| s.customer_id.as_deref()).collect();
    let reasons: Vec<&str> = steps.iter().map(|s| s.reason.as_str()).collect();
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
}
