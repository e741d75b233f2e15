//! Around a send: rows marked started just before their mail goes to SMTP,
//! and what each send ended in, written in one statement
//! ([`write_progress`]): a tick's marks carry the results that finished
//! since the last one, so a result costs no commit of its own while mail
//! flows (BENCHMARKS.md, "The in-flight limit").
//!
//! Every write here is guarded by the row's status and by `run_id`, so a
//! write replayed after a lost reply, or racing another run's sweep,
//! changes nothing it should not: a row is started (and then sent) or
//! handed back (`returned`), never both.

use super::Db;
use super::conn::on_db;
use super::params::Params;
use crate::domain::{Attempted, Counts, Delivery, ReminderId};

/// What one [`write_progress`] did.
#[derive(Debug, Default)]
pub struct Progress {
    /// The rows marked started: those this run may send.
    pub marked: Vec<ReminderId>,
    /// The rows a pause or a payment hold now keeps back (`owing::not_withheld!`):
    /// left unstarted, to be handed back unattempted.
    pub held: Vec<ReminderId>,
    /// The results written, counted.
    pub recorded: Counts,
}

/// Rows to mark started, each with the Message-ID its mail carries.
#[derive(Debug, Default, Clone, Copy)]
pub struct Marks<'a> {
    pub ids: &'a [ReminderId],
    /// In the order of `ids`.
    pub message_ids: &'a [String],
}

/// Marks `ids` as started, just before they go to SMTP, each with the
/// Message-ID its mail carries (`message_ids`, in the same order). Returns
/// the rows this run may send: those it still holds in `sending`, not
/// handed back by someone else's sweep, not started before.
pub async fn mark_started(
    db: &Db,
    run_id: i64,
    ids: &[ReminderId],
    message_ids: &[String],
) -> Result<Vec<ReminderId>, sqlx::Error> {
    let marks = Marks { ids, message_ids };
    Ok(write_progress(db, run_id, 1, marks, &[]).await?.marked)
}

/// Of the rows `ids`, those a console pause or a payment hold keeps back
/// now (`owing::not_withheld!`, as the mark reads it): the last check
/// before a letter that waited goes (`tick::last_check`).
pub async fn withheld(db: &Db, ids: &[ReminderId]) -> Result<Vec<ReminderId>, sqlx::Error> {
    let query = db.statement(concat!(
        "SELECT r.id FROM {ir}.reminders r WHERE r.id = ANY($ids) AND NOT (",
        super::owing::not_withheld!("r.invoice_id", "r.customer_id"),
        ")"
    ));
    let params = Params::new().with("ids", &ids);
    let rows: Vec<(ReminderId,)> = on_db!(db, |c| query.fetch_all(&mut *c, &params).await)?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// Records the outcome of a set of attempts in one statement (see
/// [`write_progress`]).
pub async fn record_deliveries(
    db: &Db,
    run_id: i64,
    max_attempts: u32,
    deliveries: &[Attempted],
) -> Result<Counts, sqlx::Error> {
    if deliveries.is_empty() {
        return Ok(Counts::default());
    }
    let marks = Marks::default();
    Ok(write_progress(db, run_id, max_attempts, marks, deliveries)
        .await?
        .recorded)
}

/// In one statement: marks `marks` started (see [`mark_started`]) and
/// records the outcome of `deliveries`.
///
/// A result is written only on a row still `sending` under `run_id`, and
/// an attempt is counted only if `attempts` is still what the claim saw:
/// recording the same result twice counts it once. A `Failed` that used
/// the last of `max_attempts` becomes `discarded`; a `Deferred` uses no
/// attempt, nor does a `Skipped` (recorded `skipped`, its reason in
/// `last_error`). A row refused for now (`failed`, `deferred`) forgets its
/// Message-ID: no mail carried it to the customer, and its retry may go in
/// another mail. A sent row keeps its proof (the server's reply, the
/// SHA-256), and a sent message that carries its bytes is archived
/// (compressed, by its Message-ID), only for rows recorded as sent.
pub async fn write_progress(
    db: &Db,
    run_id: i64,
    max_attempts: u32,
    marks: Marks<'_>,
    deliveries: &[Attempted],
) -> Result<Progress, sqlx::Error> {
    if marks.ids.is_empty() && deliveries.is_empty() {
        return Ok(Progress::default());
    }
    on_db!(db, |c| write_on(
        db,
        c,
        run_id,
        max_attempts,
        marks,
        deliveries
    )
    .await)
}

/// [`write_progress`]'s statement on `conn`.
pub(super) async fn write_on(
    db: &Db,
    conn: &mut sqlx::PgConnection,
    run_id: i64,
    max_attempts: u32,
    marks: Marks<'_>,
    deliveries: &[Attempted],
) -> Result<Progress, sqlx::Error> {
    // Each row finds its value by its position in id-sorted arrays, by
    // binary search (`width_bucket`), never by a join or a linear search
    // (BENCHMARKS.md, "Fewer writes per reminder"). The rows themselves
    // are found by primary key only: `run_id + 0` and `status || ''` keep
    // the guards from being used to find them (the partial index of rows
    // in flight holds an entry for every row the run ever had in flight
    // until a vacuum, growing with the backlog).
    let mut marked: Vec<(ReminderId, &String)> =
        marks.ids.iter().copied().zip(marks.message_ids).collect();
    marked.sort_by_key(|(id, _)| *id);
    let mark_ids: Vec<ReminderId> = marked.iter().map(|(id, _)| *id).collect();
    let mark_message_ids: Vec<&str> = marked.iter().map(|(_, m)| m.as_str()).collect();
    let results = Results::new(deliveries);
    let max_attempts = i64::from(max_attempts);
    let statement = db.statement(match (mark_ids.is_empty(), deliveries.is_empty()) {
        (true, true) => return Ok(Progress::default()),
        (false, true) => MARK,
        (true, false) => RECORD,
        (false, false) => MARK_AND_RECORD,
    });
    let params = results
        .params()
        .with("run_id", &run_id)
        .with("max_attempts", &max_attempts)
        .with("mark_ids", &mark_ids)
        .with("mark_message_ids", &mark_message_ids);
    let written: Vec<(ReminderId, bool, bool, bool)> = statement.fetch_all(conn, &params).await?;
    let mut progress = Progress::default();
    for (id, recorded, gave_up, held) in written {
        if recorded {
            results.count(&mut progress.recorded, id, gave_up);
        } else if held {
            progress.held.push(id);
        } else {
            progress.marked.push(id);
        }
    }
    Ok(progress)
}

/// The write statements: [`RECORD`] writes results (`recorded`, and
/// `archived` for the messages kept), [`MARK`] marks rows started, and
/// [`MARK_AND_RECORD`] does both; each returned row says which it was.
/// Each has only the parts it needs: with an empty list, PostgreSQL may
/// still read a whole (small) table for the part that has nothing to do.
/// The archive insert reads the rows the update recorded as sent and finds
/// each one's bytes by position too; with nothing to archive its arrays
/// are empty and it inserts nothing. One message settling several rows is
/// archived once.
macro_rules! write_results {
    () => {
        "recorded AS (
     UPDATE {ir}.reminders r
        SET (status, attempts, last_attempt_at, message_id, last_error, sent_at, smtp_reply,
             message_sha256) = (
            SELECT CASE
                       WHEN v.kind = 'unknown' THEN 'sending'
                       WHEN v.kind = 'deferred' THEN 'failed'
                       WHEN v.kind = 'failed' AND v.after >= $max_attempts THEN 'discarded'
                       ELSE v.kind END,
                   CASE WHEN r.attempts = v.before THEN v.after ELSE r.attempts END,
                   CASE WHEN v.after > v.before THEN now() ELSE r.last_attempt_at END,
                   CASE WHEN v.kind IN ('failed', 'deferred') THEN NULL
                        ELSE COALESCE(v.message_id, r.message_id) END,
                   CASE
                       WHEN v.kind = 'sent' THEN v.error
                       WHEN v.kind = 'failed' AND v.after >= $max_attempts
                           THEN 'gave up after ' || v.after || ' attempts: ' || v.error
                       ELSE v.error END,
                   CASE WHEN v.kind = 'sent' THEN now() ELSE r.sent_at END,
                   CASE WHEN v.kind = 'sent' THEN v.reply ELSE r.smtp_reply END,
                   CASE WHEN v.kind = 'sent' THEN v.sha256 ELSE r.message_sha256 END
              FROM (SELECT k.*, CASE WHEN k.kind IN ('deferred', 'skipped') THEN k.before ELSE k.before + 1 END AS after
                      FROM (SELECT ($kinds::text[])[p.i] AS kind, ($before::int[])[p.i] AS before,
                                   ($message_ids::text[])[p.i] AS message_id, ($errors::text[])[p.i] AS error,
                                   ($replies::text[])[p.i] AS reply, ($hashes::bytea[])[p.i] AS sha256
                              FROM (SELECT width_bucket(r.id, $result_ids::bigint[]) AS i) p) k) v)
      WHERE r.id = ANY($result_ids) AND r.run_id + 0 = $run_id AND r.status || '' = 'sending'
  RETURNING r.id, r.status, r.message_id, r.message_sha256,
            CASE WHEN ($kinds::text[])[width_bucket(r.id, $result_ids::bigint[])] = 'unknown'
                 THEN 'unknown' ELSE r.status END AS outcome
 ), archived AS (
     INSERT INTO {ir}.message_archive (message_id, sha256, size, compressed)
     SELECT DISTINCT ON (x.message_id) x.message_id, x.message_sha256, ($sizes::int[])[x.i], ($archived::bytea[])[x.i]
       FROM (SELECT rc.message_id, rc.message_sha256, width_bucket(rc.id, $result_ids::bigint[]) AS i
               FROM recorded rc WHERE rc.outcome = 'sent') x
      WHERE ($archived::bytea[])[x.i] IS NOT NULL AND x.message_id IS NOT NULL AND x.message_sha256 IS NOT NULL
      ORDER BY x.message_id
     ON CONFLICT (message_id) DO UPDATE
        SET archived_at = now(), sha256 = EXCLUDED.sha256, size = EXCLUDED.size,
            compressed = EXCLUDED.compressed
 )"
    };
}

macro_rules! write_marks {
    () => {
        concat!(
            "marked AS (
     UPDATE {ir}.reminders r
        SET started_at = CASE WHEN ",
            $crate::db::owing::not_withheld!("r.invoice_id", "r.customer_id"),
            " THEN now() END,
            message_id = ($mark_message_ids::text[])[width_bucket(r.id, $mark_ids::bigint[])]
      WHERE r.id = ANY($mark_ids) AND r.run_id + 0 = $run_id AND r.status || '' = 'sending'
        AND r.started_at IS NULL
  RETURNING r.id, r.started_at IS NULL AS held
 )"
        )
    };
}

const RECORD: &str = concat!(
    "WITH ",
    write_results!(),
    " SELECT id, true AS recorded, outcome = 'discarded' AS gave_up, false AS held FROM recorded"
);

const MARK: &str = concat!(
    "WITH ",
    write_marks!(),
    " SELECT id, false AS recorded, false AS gave_up, held FROM marked"
);

const MARK_AND_RECORD: &str = concat!(
    "WITH ",
    write_results!(),
    ", ",
    write_marks!(),
    " SELECT id, true AS recorded, outcome = 'discarded' AS gave_up, false AS held FROM recorded",
    " UNION ALL SELECT id, false, false, held FROM marked"
);

/// Results laid out as the write statement reads them: arrays in id order.
struct Results<'a> {
    sorted: Vec<&'a Attempted>,
    ids: Vec<ReminderId>,
    before: Vec<i32>,
    kinds: Vec<&'static str>,
    message_ids: Vec<Option<String>>,
    errors: Vec<Option<String>>,
    replies: Vec<Option<String>>,
    hashes: Vec<Option<Vec<u8>>>,
    /// Only when something is archived: otherwise empty arrays, whose
    /// every element reads as NULL, and the archive insert inserts nothing.
    sizes: Vec<Option<i32>>,
    archived: Vec<Option<Vec<u8>>>,
}

impl<'a> Results<'a> {
    fn new(deliveries: &'a [Attempted]) -> Self {
        let n = deliveries.len();
        let archiving = deliveries.iter().any(
            |a| matches!(&a.delivery, Delivery::Sent { proof, .. } if proof.archived.is_some()),
        );
        let mut sorted: Vec<&Attempted> = deliveries.iter().collect();
        sorted.sort_by_key(|a| a.id);
        let mut r = Self {
            ids: Vec::with_capacity(n),
            before: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            message_ids: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            replies: Vec::with_capacity(n),
            hashes: Vec::with_capacity(n),
            sizes: Vec::new(),
            archived: Vec::new(),
            sorted: Vec::new(),
        };
        for a in &sorted {
            r.ids.push(a.id);
            r.before.push(a.attempts_before);
            r.kinds.push(a.delivery.kind());
            let mut kept = None;
            let (message_id, error, reply, hash) = match &a.delivery {
                Delivery::Sent { message_id, proof } => {
                    kept = proof.archived.as_ref();
                    let refused = (!proof.refused.is_empty())
                        .then(|| format!("not delivered to {}", proof.refused.join("; ")));
                    (
                        Some(message_id.clone()),
                        refused,
                        Some(proof.reply.clone()),
                        Some(proof.sha256.to_vec()),
                    )
                }
                Delivery::Failed { error }
                | Delivery::Deferred { error }
                | Delivery::Discarded { error }
                | Delivery::Unknown { error } => (None, Some(error.clone()), None, None),
                Delivery::Skipped { reason } => (None, Some(reason.label().to_owned()), None, None),
            };
            r.message_ids.push(message_id);
            r.errors.push(error);
            r.replies.push(reply);
            r.hashes.push(hash);
            if archiving {
                r.sizes
                    .push(kept.map(|m| i32::try_from(m.0.len()).unwrap_or(i32::MAX)));
                r.archived
                    .push(kept.map(|m| super::archive::compress(&m.0)));
            }
        }
        r.sorted = sorted;
        r
    }

    fn params(&self) -> Params<'_> {
        Params::new()
            .with("result_ids", &self.ids)
            .with("before", &self.before)
            .with("kinds", &self.kinds)
            .with("message_ids", &self.message_ids)
            .with("errors", &self.errors)
            .with("replies", &self.replies)
            .with("hashes", &self.hashes)
            .with("sizes", &self.sizes)
            .with("archived", &self.archived)
    }

    /// Counts the written row `id` from the delivery it was written with,
    /// found as the statement found it (the last of its id in `sorted`).
    fn count(&self, counts: &mut Counts, id: ReminderId, gave_up: bool) {
        let at = self.sorted.partition_point(|a| a.id <= id).checked_sub(1);
        if let Some(a) = at.and_then(|i| self.sorted.get(i)).filter(|a| a.id == id) {
            counts.count_written(&a.delivery, gave_up);
        }
    }
}
