//! `audit`: the operator's check of the reminders table.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use chrono::NaiveDate;
use sqlx::PgPool;

use super::exit;
use crate::config::Settings;
use crate::db;
use crate::db::audit::{DuplicateGroup, FailedRow, MissingRow, UnknownRow};
use crate::period::period_key;

/// How many missing invoices are listed (all are counted).
const MISSING_LISTED: u32 = 100;

#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditReport {
    pub period: String,
    pub today: NaiveDate,
    /// (invoice_id, period) with more than one reminder; exit 1 if any.
    pub duplicates: Vec<DuplicateGroup>,
    /// `sending` rows whose delivery is unknown (at-most-once: not resent).
    pub unknown: Vec<UnknownRow>,
    /// `failed` and `discarded` rows of this period.
    pub failed: Vec<FailedRow>,
    /// Overdue invoices with no reminder for this period.
    pub missing_count: i64,
    pub missing: Vec<MissingRow>,
    /// Reminders of this period by status.
    pub counts: BTreeMap<String, i64>,
    /// Reminders of all periods by status.
    pub counts_all_periods: BTreeMap<String, i64>,
}

pub async fn build_report(
    pool: &PgPool,
    settings: &Settings,
    unknown_after: Duration,
) -> anyhow::Result<AuditReport> {
    let today = db::today(pool, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    let period = period_key(today, settings.reminders.cadence);
    let cutoff = settings.reminders.overdue_cutoff(today);
    let read = "failed to read the reminders table (did you run `migrate`?)";
    Ok(AuditReport {
        duplicates: db::audit::duplicates(pool).await.context(read)?,
        unknown: db::audit::unknown(pool, unknown_after.as_secs_f64())
            .await
            .context(read)?,
        failed: db::audit::failed(pool, &period).await.context(read)?,
        missing_count: db::audit::count_missing(pool, cutoff, &period)
            .await
            .context(read)?,
        missing: db::audit::missing(pool, cutoff, &period, MISSING_LISTED)
            .await
            .context(read)?,
        counts: db::audit::counts_by_status(pool, Some(&period))
            .await
            .context(read)?
            .into_iter()
            .collect(),
        counts_all_periods: db::audit::counts_by_status(pool, None)
            .await
            .context(read)?
            .into_iter()
            .collect(),
        period,
        today,
    })
}

pub async fn audit(
    settings: &Settings,
    json: bool,
    unknown_after: Duration,
) -> anyhow::Result<ExitCode> {
    let pool = super::connect(settings).await?;
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
    outln!("audit of period {} (database date {})", r.period, r.today);
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
                d.period,
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
    outln!("reminders this period: {}", counts(&r.counts));
    outln!("reminders, all periods: {}", counts(&r.counts_all_periods));
    outln!(
        "unknown delivery ('sending' after its run ended or for over {}): {}",
        humantime::format_duration(unknown_after),
        r.unknown.len()
    );
    for u in &r.unknown {
        outln!(
            "  invoice {} period {} (reminder {}, run {:?}, replica {}) claimed {}{}",
            u.invoice_id,
            u.period,
            u.reminder_id,
            u.run_id,
            u.replica_id.as_deref().unwrap_or("?"),
            u.claimed_at,
            u.last_error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    outln!("failed or discarded this period: {}", r.failed.len());
    for f in &r.failed {
        outln!(
            "  invoice {} {} after {} attempt(s): {}",
            f.invoice_id,
            f.status,
            f.attempts,
            f.last_error.as_deref().unwrap_or("")
        );
    }
    outln!(
        "missing (overdue, no reminder this period): {}",
        r.missing_count
    );
    for m in &r.missing {
        outln!("  invoice {} due {}", m.invoice_id, m.due_date);
    }
    if r.missing_count > r.missing.len() as i64 {
        outln!(
            "  ... and {} more",
            r.missing_count - r.missing.len() as i64
        );
    }
    Ok(())
}
