//! `resolve`: settle unknown deliveries without writing SQL. `--sent` once
//! the mail server's log shows the Message-ID went out, `--resend` once it
//! shows it did not. Rows that are not unknown are refused, and so is
//! resending a step that is no longer the invoice's due step.

use std::process::ExitCode;

use anyhow::Context as _;

use super::{connect, exit};
use crate::config::Settings;
use crate::db;
use crate::domain::ReminderId;
use crate::mail;

pub(super) async fn resolve(
    settings: &Settings,
    sent: Vec<i64>,
    resend: Vec<i64>,
) -> anyhow::Result<ExitCode> {
    let database = connect(settings).await?;
    super::check_source(&database).await?;
    let today = db::today(&database, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    let windows = settings.reminders.stages.windows(today);
    let resending = !resend.is_empty();
    let named: Vec<ReminderId> = sent
        .iter()
        .chain(&resend)
        .copied()
        .map(ReminderId)
        .collect();
    let rows = db::resolve::named_rows(&database, &named, &windows)
        .await
        .map_err(super::db_failed("failed to read the reminders"))?;
    let mut refused = 0;
    for id in &named {
        if !rows.iter().any(|r| r.id == *id) {
            outln!("reminder {id}: no such reminder; unchanged");
            refused += 1;
        }
    }
    let mut eligible = Vec::new();
    for row in &rows {
        let what = format!(
            "reminder {} (invoice {}, {})",
            row.id, row.invoice_id, row.period
        );
        if !row.unknown {
            outln!(
                "{what}: its delivery is not unknown (status {}); unchanged",
                row.status
            );
            refused += 1;
        } else if resending && row.due_step.as_deref() != Some(row.period.as_str()) {
            let now = row.due_step.as_deref().unwrap_or("none");
            outln!(
                "{what}: step {} is no longer due (due step now: {now}); not resent (use --sent, or leave it)",
                row.period
            );
            refused += 1;
        } else {
            eligible.push(row);
        }
    }
    let changed = if resending {
        let ids: Vec<ReminderId> = eligible.iter().map(|r| r.id).collect();
        db::resolve::mark_for_resend(&database, &ids).await
    } else {
        let rows: Vec<(ReminderId, String)> = eligible
            .iter()
            .map(|r| {
                (
                    r.id,
                    mail::message_id(&r.invoice_id, &r.period, &settings.smtp.message_id_domain),
                )
            })
            .collect();
        db::resolve::mark_sent(&database, &rows).await
    }
    .context("failed to update the reminders")?;
    for row in eligible {
        let what = format!(
            "reminder {} (invoice {}, {})",
            row.id, row.invoice_id, row.period
        );
        if !changed.contains(&row.id) {
            outln!("{what}: changed meanwhile; unchanged");
            refused += 1;
        } else if resending {
            outln!(
                "{what}: unknown -> failed; the next tick sends it again with the same Message-ID"
            );
        } else {
            outln!("{what}: unknown -> sent");
        }
    }
    Ok(if refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    })
}
