//! `audit`: the operator's check of the reminders table.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use crate::db::Db;
use anyhow::Context as _;
use chrono::NaiveDate;

use super::exit;
use crate::config::Settings;
use crate::db;
use crate::db::audit::{DuplicateGroup, FailedRow, UnknownRow};
use crate::db::owed::{OwedReminder, OwedRow};
use crate::db::suppressions::SkippedRow;
use crate::operator::unknown::{UnknownMail, unknown_mails};

/// How many missing invoices are listed (all are counted).
const MISSING_LISTED: usize = 100;
/// How many skipped reminders are listed (all are counted).
const SKIPPED_LISTED: i64 = 100;

#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditReport {
    /// The database's date in `schedule.timezone`.
    pub today: NaiveDate,
    /// (invoice_id, period) with more than one reminder; exit 1 if any.
    pub duplicates: Vec<DuplicateGroup>,
    /// `sending` rows whose delivery is unknown (at-most-once: not resent).
    pub unknown: Vec<UnknownRow>,
    /// The same rows by mail: one entry per stored Message-ID (a
    /// statement's rows share one), settled as a whole by `resolve`.
    pub unknown_mails: Vec<UnknownMail>,
    /// `failed` rows (retried while their step is due) and rows
    /// `discarded` in the last 7 days.
    pub failed: Vec<FailedRow>,
    /// Reminders recorded `skipped` in the last 7 days (every recipient
    /// suppressed: `reason` "suppressed"), newest first. Not missing, not
    /// failed: the step keeps its claim and is not tried again.
    pub skipped_count: i64,
    pub skipped: Vec<SkippedRow>,
    /// Unpaid, unpaused invoices whose due step has no reminder yet.
    pub missing_count: i64,
    pub missing: Vec<OwedReminder>,
    /// Every reminder by status.
    pub counts: BTreeMap<String, i64>,
    /// Reminders sent, by step.
    pub sent_by_step: BTreeMap<String, i64>,
    /// Source rows that owe a reminder but cannot make one (a repeated
    /// key, a NULL, a bad currency or address), from a bounded check.
    pub source_problems_count: usize,
    pub source_problems: Vec<crate::domain::SourceProblem>,
    /// Owed rows the check read (at most `operator::survey::ROWS_CHECKED`).
    pub source_rows_checked: usize,
    /// Invoices a payment signal holds now, by state (not missing: the
    /// provider said paid, pending or disputed).
    pub payment_holds: db::payments::HoldCounts,
}

pub async fn build_report(
    pool: &Db,
    settings: &Settings,
    unknown_after: Duration,
) -> anyhow::Result<AuditReport> {
    let today = db::today(pool, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    let read = || super::db_failed("failed to read the reminders table");
    let survey = crate::operator::survey::survey(pool, settings, today)
        .await
        .map_err(super::db_failed(
            "failed to read the invoices that owe a reminder",
        ))?;
    let missing: Vec<OwedReminder> = survey
        .owed
        .rows
        .iter()
        .filter(|r| r.kind == "new")
        .filter_map(OwedRow::reminder)
        .take(MISSING_LISTED)
        .collect();
    let missing_count = survey.owed.total_new;
    let problems = survey.problems;
    let (counts, sent_by_step) = db::audit::counts(pool).await.map_err(read())?;
    let unknown = db::audit::unknown(pool, unknown_after.as_secs_f64())
        .await
        .map_err(read())?;
    let (skipped_count, skipped) = db::suppressions::skipped(pool, SKIPPED_LISTED)
        .await
        .map_err(read())?;
    Ok(AuditReport {
        duplicates: db::audit::duplicates(pool).await.map_err(read())?,
        unknown_mails: unknown_mails(&unknown),
        unknown,
        failed: db::audit::failed(pool).await.map_err(read())?,
        skipped_count,
        skipped,
        missing_count,
        missing,
        counts,
        sent_by_step,
        source_problems_count: problems.count,
        source_rows_checked: problems.rows_checked,
        source_problems: problems.listed,
        payment_holds: db::payments::counts(pool)
            .await
            .map_err(super::db_failed("failed to read the payment holds"))?,
        today,
    })
}

pub async fn audit(
    settings: &Settings,
    json: bool,
    unknown_after: Duration,
) -> anyhow::Result<ExitCode> {
    let pool = super::connect(settings).await?;
    super::check_source(&pool).await?;
    let report = build_report(&pool, settings, unknown_after).await?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).context("failed to encode the report")?
        );
    } else {
        print_human(&report, unknown_after)?;
    }
    Ok(if report.duplicates.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    })
}

fn print_human(r: &AuditReport, unknown_after: Duration) -> std::io::Result<()> {
    outln!("audit (database date {})", r.today);
    if r.duplicates.is_empty() {
        outln!("duplicates: none");
    } else {
        outln!(
            "duplicates: {} (invoice, period) pair(s) with more than one reminder",
            r.duplicates.len()
        );
        for d in &r.duplicates {
            outln!(
                "  invoice {} period {}: {} rows",
                d.invoice_id,
                d.step,
                d.copies
            );
        }
    }
    let counts = |m: &BTreeMap<String, i64>| {
        if m.is_empty() {
            "none".to_owned()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    outln!("reminders by status: {}", counts(&r.counts));
    outln!("sent by step: {}", counts(&r.sent_by_step));
    let holds = &r.payment_holds;
    outln!(
        "held by payment signals: {} (paid {}, pending {}, disputed {}, dispute lost {})",
        holds.total(),
        holds.paid,
        holds.pending,
        holds.disputed,
        holds.lost
    );
    outln!(
        "unlinked payment signals (no invoice found yet, last {} days): {}",
        db::payments::UNLINKED_DAYS,
        holds.unlinked
    );
    let stored = r.unknown.iter().filter(|u| u.message_id.is_some()).count();
    outln!(
        "unknown delivery ('sending' after its run ended or for over {}): {} row(s) in {} mail(s), {stored} row(s) with a stored Message-ID to look up",
        humantime::format_duration(unknown_after),
        r.unknown.len(),
        r.unknown_mails.len()
    );
    for m in &r.unknown_mails {
        let ids: Vec<String> = m.reminder_ids.iter().map(ToString::to_string).collect();
        let invoices: Vec<String> = m
            .invoice_ids
            .iter()
            .zip(&m.steps)
            .map(|(i, p)| format!("{i} {p}"))
            .collect();
        let run = match (m.run_id, &m.replica_id) {
            (Some(run), Some(replica)) => format!("run {run} on {replica}"),
            (Some(run), None) => format!("run {run}"),
            (None, _) => "a run no longer recorded".to_owned(),
        };
        outln!(
            "  {}: reminder(s) {} (invoice {}), {run}, claimed {}{}",
            m.message_id.as_deref().map_or_else(
                || "no stored Message-ID".to_owned(),
                |id| format!("Message-ID <{id}>")
            ),
            ids.join(", "),
            invoices.join(", "),
            m.claimed_at,
            m.last_error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    if !r.unknown.is_empty() {
        outln!(
            "  look each Message-ID up in the mail server's log, then: invoice-reminder resolve --sent ID (it went out) or --resend ID (it did not); one reminder of a mail settles all of it"
        );
    }
    outln!(
        "failed, or discarded in the last 7 days: {}",
        r.failed.len()
    );
    for f in &r.failed {
        // A row handed back unattempted (the relay down, throttling, or a
        // connection cut before the end of the message) waits for no
        // backoff: it goes out on the next tick the relay answers.
        let tried = match f.attempts {
            0 => "not attempted yet, goes out on the next tick".to_owned(),
            n => format!("after {n} attempt(s)"),
        };
        outln!(
            "  invoice {} {} {} {tried}: {}",
            f.invoice_id,
            f.step,
            f.status,
            f.last_error.as_deref().unwrap_or("")
        );
    }
    outln!(
        "skipped in the last 7 days (every recipient suppressed; `suppress list`): {}",
        r.skipped_count
    );
    for s in &r.skipped {
        outln!(
            "  reminder {} invoice {} {}: {} (claimed {})",
            s.reminder_id,
            s.invoice_id,
            s.step,
            s.reason.as_deref().unwrap_or("skipped"),
            s.claimed_at
        );
    }
    if r.skipped_count > r.skipped.len() as i64 {
        outln!(
            "  ... and {} more",
            r.skipped_count - r.skipped.len() as i64
        );
    }
    let problems = crate::operator::survey::SourceProblems {
        count: r.source_problems_count,
        listed: r.source_problems.clone(),
        rows_checked: r.source_rows_checked,
    };
    for line in problems.lines() {
        outln!("{line}");
    }
    outln!(
        "missing (unpaid invoices whose due step has no reminder): {}",
        r.missing_count
    );
    for m in &r.missing {
        outln!("  invoice {} due {}: {}", m.invoice_id, m.due_date, m.step);
    }
    if r.missing_count > r.missing.len() as i64 {
        outln!(
            "  ... and {} more",
            r.missing_count - r.missing.len() as i64
        );
    }
    Ok(())
}
