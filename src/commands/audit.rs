//! `audit`: the operator's check of the reminders table.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use super::{desk, exit};
use crate::config::Settings;
pub use crate::operator::audit::AuditReport;

pub async fn audit(
    settings: &Settings,
    json: bool,
    unknown_after: Duration,
) -> anyhow::Result<ExitCode> {
    let desk = desk(settings).await?;
    desk.check_source().await?;
    let report = desk.audit(unknown_after).await?;
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
        crate::operator::holds::UNLINKED_DAYS,
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
            "  look each Message-ID up in the mail server's log, then: invoice-reminder settle --sent ID (it went out) or --resend ID (it did not); one reminder of a mail settles all of it"
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
