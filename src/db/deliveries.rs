//! After the claim: starting sends, recording what they ended in, returning
//! rows never started, and retiring rows that will never be sent.
//!
//! Every write here is guarded by the row's status (and, for a run's own
//! rows, by `run_id`), so a write replayed after a lost reply, or racing
//! another run's sweep, changes nothing it should not: a row is started
//! (and then sent) or handed back, never both.

use std::time::Duration;

use super::Db;
use super::conn::on_db;
use super::owing::{Today, in_window, windows};
use super::runs::{run_ended, run_gone};
use crate::domain::{Attempted, Counts, Delivery, ReminderId};

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
    // In id order: each row finds its Message-ID by binary search
    // (`width_bucket`), as `record_deliveries` finds its result.
    let mut sorted: Vec<(ReminderId, &String)> = ids.iter().copied().zip(message_ids).collect();
    sorted.sort_by_key(|(id, _)| *id);
    let ids: Vec<ReminderId> = sorted.iter().map(|(id, _)| *id).collect();
    let message_ids: Vec<&str> = sorted.iter().map(|(_, m)| m.as_str()).collect();
    // `run_id + 0` and `status || ''`: the guards are checked on the rows
    // found by primary key, never used to find them. Used to find them,
    // the partial index of rows in flight is read with every entry it ever
    // had for the run (an entry outlives its row's leaving `sending` until
    // a vacuum), growing with the backlog. `record_deliveries` does the
    // same.
    on_db!(db, |c| {
        sqlx::query_scalar(db.sql(
        "UPDATE {ir}.reminders r SET started_at = now(), last_attempt_at = now(),
                message_id = ($3::text[])[width_bucket(r.id, $2::bigint[])]
          WHERE r.id = ANY($2) AND r.run_id + 0 = $1 AND r.status || '' = 'sending' AND r.started_at IS NULL
         RETURNING r.id"
    ),)
    .persistent(db.named())
    .bind(run_id)
    .bind(&ids)
    .bind(&message_ids)
    .fetch_all(&mut *c)
    .await
    })
}

/// Records the outcome of a set of attempts in one statement. Only rows
/// still `sending` under `run_id` are touched, and an attempt is counted
/// only if `attempts` is still what the claim saw: recording the same
/// result twice counts it once. A `Failed` that used the last of
/// `max_attempts` becomes `discarded`; a `Deferred` uses no attempt, nor
/// does a `Skipped` (recorded `skipped`, its reason in `last_error`).
///
/// A row refused for now (`failed`, `deferred`) forgets its Message-ID:
/// no mail carried it to the customer, and its retry may go in another
/// mail. A sent row keeps its proof (the server's reply, the SHA-256), and a
/// sent message that carries its bytes is archived (compressed, by its
/// Message-ID) by the same statement, only for rows it recorded as sent.
pub async fn record_deliveries(
    db: &Db,
    run_id: i64,
    max_attempts: u32,
    deliveries: &[Attempted],
) -> Result<Counts, sqlx::Error> {
    if deliveries.is_empty() {
        return Ok(Counts::default());
    }
    let n = deliveries.len();
    let (mut ids, mut before, mut kinds) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut message_ids, mut errors, mut replies) = (
        Vec::<Option<String>>::with_capacity(n),
        Vec::<Option<String>>::with_capacity(n),
        Vec::<Option<String>>::with_capacity(n),
    );
    let mut hashes = Vec::<Option<Vec<u8>>>::with_capacity(n);
    // Only when something is archived: otherwise empty arrays, whose every
    // element reads as NULL, and the archive insert inserts nothing.
    let archiving = deliveries
        .iter()
        .any(|a| matches!(&a.delivery, Delivery::Sent { proof, .. } if proof.archived.is_some()));
    let (mut sizes, mut archived) = (Vec::<Option<i32>>::new(), Vec::<Option<Vec<u8>>>::new());
    // In id order: the statement finds each row's place by binary search.
    let mut sorted: Vec<&Attempted> = deliveries.iter().collect();
    sorted.sort_by_key(|a| a.id);
    for a in &sorted {
        ids.push(a.id);
        before.push(a.attempts_before);
        kinds.push(a.delivery.kind());
        let mut kept = None;
        match &a.delivery {
            Delivery::Sent { message_id, proof } => {
                message_ids.push(Some(message_id.clone()));
                errors.push(None);
                replies.push(Some(proof.reply.clone()));
                hashes.push(Some(proof.sha256.to_vec()));
                kept = proof.archived.as_ref();
            }
            Delivery::Failed { error }
            | Delivery::Deferred { error }
            | Delivery::Discarded { error }
            | Delivery::Unknown { error } => {
                message_ids.push(None);
                errors.push(Some(error.clone()));
                replies.push(None);
                hashes.push(None);
            }
            Delivery::Skipped { reason } => {
                message_ids.push(None);
                errors.push(Some(reason.label().to_owned()));
                replies.push(None);
                hashes.push(None);
            }
        }
        if archiving {
            sizes.push(kept.map(|m| i32::try_from(m.0.len()).unwrap_or(i32::MAX)));
            archived.push(kept.map(|m| super::archive::compress(&m.0)));
        }
    }
    // Each row finds its result by its position in the arrays, never by a
    // join: the planner, estimating the guarded rows at one, joined the 250
    // results to them in a nested loop (62,500 comparisons, 15-45 ms a
    // chunk at 20k rows, measured), and with the table's statistics out of
    // date it scans the table for a join. The position is a binary search
    // (`width_bucket` over the ids, sorted above): `array_position`, a
    // linear search per row, made the statement O(n²), 5.4 ms for 250 rows
    // against 3.1-3.7 ms now, and 4.7 % of the machine's CPU in a 20k tick
    // (measured). The rows themselves are found by primary key only (see
    // `mark_started`).
    //
    // The archive insert reads the rows the update returned (sent ones
    // only) and finds each one's bytes by position too; with nothing to
    // archive its arrays are empty and it inserts nothing. One message
    // settling several rows is archived once.
    let written: Vec<(ReminderId, bool)> = on_db!(db, |c| {
        sqlx::query_as(db.sql(
        "WITH recorded AS (
         UPDATE {ir}.reminders r
            SET (status, attempts, message_id, last_error, sent_at, smtp_reply, message_sha256) = (
                SELECT CASE
                           WHEN v.kind = 'unknown' THEN 'sending'
                           WHEN v.kind = 'deferred' THEN 'failed'
                           WHEN v.kind = 'failed' AND v.after >= $6 THEN 'discarded'
                           ELSE v.kind END,
                       CASE WHEN r.attempts = v.before THEN v.after ELSE r.attempts END,
                       CASE WHEN v.kind IN ('failed', 'deferred') THEN NULL
                            ELSE COALESCE(v.message_id, r.message_id) END,
                       CASE
                           WHEN v.kind = 'sent' THEN NULL
                           WHEN v.kind = 'failed' AND v.after >= $6
                               THEN 'gave up after ' || v.after || ' attempts: ' || v.error
                           ELSE v.error END,
                       CASE WHEN v.kind = 'sent' THEN now() ELSE r.sent_at END,
                       CASE WHEN v.kind = 'sent' THEN v.reply ELSE r.smtp_reply END,
                       CASE WHEN v.kind = 'sent' THEN v.sha256 ELSE r.message_sha256 END
                  FROM (SELECT k.*, CASE WHEN k.kind IN ('deferred', 'skipped') THEN k.before ELSE k.before + 1 END AS after
                          FROM (SELECT ($3::text[])[p.i] AS kind, ($2::int[])[p.i] AS before,
                                       ($4::text[])[p.i] AS message_id, ($5::text[])[p.i] AS error,
                                       ($8::text[])[p.i] AS reply, ($9::bytea[])[p.i] AS sha256
                                  FROM (SELECT width_bucket(r.id, $1::bigint[]) AS i) p) k) v)
          WHERE r.id = ANY($1) AND r.run_id + 0 = $7 AND r.status || '' = 'sending'
      RETURNING r.id, r.status, r.message_id, r.message_sha256,
                CASE WHEN ($3::text[])[width_bucket(r.id, $1::bigint[])] = 'unknown'
                     THEN 'unknown' ELSE r.status END AS outcome
         ), archived AS (
             INSERT INTO {ir}.message_archive (message_id, sha256, size, compressed)
             SELECT DISTINCT ON (x.message_id) x.message_id, x.message_sha256, ($10::int[])[x.i], ($11::bytea[])[x.i]
               FROM (SELECT rc.message_id, rc.message_sha256, width_bucket(rc.id, $1::bigint[]) AS i
                       FROM recorded rc WHERE rc.outcome = 'sent') x
              WHERE ($11::bytea[])[x.i] IS NOT NULL AND x.message_id IS NOT NULL AND x.message_sha256 IS NOT NULL
              ORDER BY x.message_id
             ON CONFLICT (message_id) DO UPDATE
                SET archived_at = now(), sha256 = EXCLUDED.sha256, size = EXCLUDED.size,
                    compressed = EXCLUDED.compressed
         )
         SELECT id, outcome = 'discarded' AS gave_up FROM recorded"
    ),)
    .persistent(db.named())
    .bind(&ids)
    .bind(&before)
    .bind(&kinds)
    .bind(&message_ids)
    .bind(&errors)
    .bind(i64::from(max_attempts))
    .bind(run_id)
    .bind(&replies)
    .bind(&hashes)
    .bind(&sizes)
    .bind(&archived)
    .fetch_all(&mut *c)
    .await
    })?;
    // Each written row is counted from the delivery it was written with,
    // found as the statement found it (the last of its id in `sorted`).
    let mut recorded = Counts::default();
    for (id, gave_up) in written {
        let at = sorted.partition_point(|a| a.id <= id).checked_sub(1);
        if let Some(a) = at.and_then(|i| sorted.get(i)).filter(|a| a.id == id) {
            recorded.count_written(&a.delivery, gave_up);
        }
    }
    Ok(recorded)
}

/// Returns the rows run `run_id` still holds in `sending` that never
/// started, and `unsent` (started, then never handed to the server): a
/// first claim is deleted (the invoice is simply owed again), a retry goes
/// back to `failed`, forgetting the Message-ID of `fresh` rows (made for
/// this attempt, carried by no mail) and keeping the others' (an unknown
/// mail's, which a resend carries again).
///
/// Sweeping by run rather than by a list of claimed ids also returns rows
/// whose claim committed but whose reply never reached us (the database
/// connection broke mid-statement): we never saw them, so we never sent them.
pub async fn hand_back(
    db: &Db,
    run_id: i64,
    unsent: &[ReminderId],
    fresh: &[ReminderId],
) -> Result<u64, sqlx::Error> {
    let (deleted, restored): (i64, i64) = on_db!(db, |c| sqlx::query_as(db.sql(
        "WITH deleted AS (
             DELETE FROM {ir}.reminders
              WHERE run_id = $1 AND status = 'sending' AND attempts = 0
                AND (started_at IS NULL OR id = ANY($2))
             RETURNING id
         ), restored AS (
             UPDATE {ir}.reminders SET status = 'failed', started_at = NULL,
                    message_id = CASE WHEN id = ANY($3) THEN NULL ELSE message_id END
              WHERE run_id = $1 AND status = 'sending' AND attempts > 0
                AND (started_at IS NULL OR id = ANY($2))
             RETURNING id
         )
         SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM restored)"
    ),)
    .persistent(db.named())
    .bind(run_id)
    .bind(unsent)
    .bind(fresh)
    .fetch_one(&mut *c)
    .await)?;
    Ok(u64::try_from(deleted + restored).unwrap_or(0))
}

/// Returns the never-started rows of runs that are over for good (finished,
/// or past their lease by the database clock): what a killed replica
/// claimed but never handed to SMTP. Started rows stay (unknown).
pub async fn hand_back_abandoned(db: &Db) -> Result<u64, sqlx::Error> {
    let (deleted, restored): (i64, i64) = on_db!(db, |c| {
        sqlx::query_as(
        db.sql(concat!("WITH over AS (
             SELECT r.id, r.attempts
               FROM {ir}.reminders r
               LEFT JOIN {ir}.job_runs j ON j.id = r.run_id
              WHERE r.status = 'sending' AND r.started_at IS NULL AND ", run_ended!("j"), "
                FOR UPDATE OF r SKIP LOCKED
         ), deleted AS (
             DELETE FROM {ir}.reminders r USING over
              WHERE r.id = over.id AND over.attempts = 0 AND r.status = 'sending' AND r.started_at IS NULL
             RETURNING r.id
         ), restored AS (
             UPDATE {ir}.reminders r SET status = 'failed'
               FROM over
              WHERE r.id = over.id AND over.attempts > 0 AND r.status = 'sending' AND r.started_at IS NULL
             RETURNING r.id
         )
         SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM restored)")),
    )
    .persistent(db.named())
    .fetch_one(&mut *c)
    .await
    })?;
    Ok(u64::try_from(deleted + restored).unwrap_or(0))
}

/// `failed` rows whose step is no longer their invoice's due step, and
/// `failed` rows whose attempts already reach `max_attempts` (it was
/// lowered), become `discarded` with the reason. A superseded step is never
/// sent late. Returns how many.
pub async fn retire_failed(db: &Db, today: &Today, max_attempts: u32) -> Result<u64, sqlx::Error> {
    // One statement: a row is retired for the first reason that applies.
    // A step is superseded only by the invoice's one source row: a key on
    // several rows (a source problem) says nothing certain about its step.
    let statement = db.statement(concat!(
        "UPDATE {ir}.reminders r SET status = 'discarded', last_error = CASE",
        " WHEN x.superseded_by IS NOT NULL THEN 'superseded by ' || x.superseded_by",
        " ELSE 'gave up: ' || r.attempts || ' attempts reach reminders.max_attempts = ' || $max_attempts",
        " || COALESCE(' (last error: ' || r.last_error || ')', '') END",
        " FROM (SELECT f.id, (SELECT w.key FROM {src} s, ",
        windows!(),
        " WHERE s.invoice_id::text = f.invoice_id AND ",
        in_window!("s"),
        " AND f.period <> w.key",
        " AND (SELECT count(*) FROM {src} k WHERE k.invoice_id::text = f.invoice_id) = 1",
        " LIMIT 1) AS superseded_by FROM {ir}.reminders f WHERE f.status = 'failed') x",
        " WHERE r.id = x.id AND r.status = 'failed'",
        " AND (x.superseded_by IS NOT NULL OR r.attempts >= $max_attempts)"
    ));
    let max_attempts = i64::from(max_attempts);
    let params = today.params().with("max_attempts", &max_attempts);
    on_db!(db, |c| sqlx::query_with(
        statement.sql(),
        statement.args(&params)?
    )
    .persistent(db.named())
    .execute(&mut *c)
    .await
    .map(|done| done.rows_affected()))
}

/// `reminders.resend_unknown_after`: started rows left `sending` by runs
/// whose lease is over for good (by the database clock: their process can
/// no longer write a result; a run whose process still holds results keeps
/// its lease), claimed longer than `after` ago, go back to `failed`, so the
/// next tick sends them again (with the same Message-ID) while their step
/// is due. Returns how many.
pub async fn resend_unknown(db: &Db, after: Duration) -> Result<u64, sqlx::Error> {
    on_db!(db, |c| {
        sqlx::query(
        db.sql(concat!("UPDATE {ir}.reminders r
            SET status = 'failed', started_at = NULL,
                last_error = 'delivery unknown; returned for resending by reminders.resend_unknown_after'
          WHERE r.status = 'sending' AND r.started_at IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM {ir}.job_runs j WHERE j.id = r.run_id AND NOT ", run_gone!("j"), ")
            AND r.claimed_at < now() - make_interval(secs => $1)")),
    )
    .persistent(db.named())
    .bind(after.as_secs_f64())
    .execute(&mut *c)
    .await
    .map(|done| done.rows_affected())
    })
}
