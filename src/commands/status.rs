//! `status`: who holds the lock, what the last runs did, how many
//! reminders are in each state.

use std::process::ExitCode;

use anyhow::Context as _;

use crate::config::Settings;
use crate::lock::{Holder, LockBackend};
use crate::operator::lock_holder::lock_holder;
use crate::operator::overview::RunRow;

#[derive(Debug, serde::Serialize)]
struct StatusReport {
    lock: String,
    holder: Option<Holder>,
    last_runs: Vec<RunRow>,
    counts: Vec<(String, i64)>,
}

pub async fn status(settings: Settings, json: bool, runs: u32) -> anyhow::Result<ExitCode> {
    let lock = LockBackend::from_settings(&settings, Default::default())
        .context("failed to set up reading the lock")?;
    let desk = super::desk(&settings).await?;
    let holder = lock_holder(&desk, &lock).await?;
    let report = StatusReport {
        lock: lock.describe(),
        holder,
        last_runs: desk
            .recent_runs(runs)
            .await
            .context("failed to read job_runs")?,
        counts: desk
            .counts()
            .await
            .context("failed to read reminders")?
            .0
            .into_iter()
            .collect(),
    };
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).context("failed to encode the status")?
        );
        return Ok(ExitCode::SUCCESS);
    }
    match &report.holder {
        None => outln!("lock ({}): free", report.lock),
        Some(h) => {
            let mut details = Vec::new();
            if let Some(token) = &h.token {
                details.push(format!("token {token}"));
            }
            if let Some(pid) = h.pid {
                details.push(format!("backend pid {pid}"));
            }
            if let Some(ms) = h.ttl_left_ms {
                details.push(format!("{ms} ms left"));
            }
            outln!(
                "lock ({}): held by {} ({})",
                report.lock,
                h.replica_id.as_deref().unwrap_or("an unknown replica"),
                details.join(", ")
            )
        }
    }
    outln!("last runs:");
    if report.last_runs.is_empty() {
        outln!("  none");
    }
    for r in &report.last_runs {
        outln!(
            "  #{} {} run date {} started {} {} claimed {} sent {} failed {}{}",
            r.id,
            r.replica_id,
            r.run_date,
            r.started_at.format("%Y-%m-%d %H:%M:%S%.3f"),
            match (&r.finished_at, &r.outcome) {
                (Some(_), Some(o)) => o.clone(),
                _ => "running (or died)".to_owned(),
            },
            r.claimed,
            r.sent,
            r.failed,
            r.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    let counts = report
        .counts
        .iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    outln!(
        "reminders by status: {}",
        if counts.is_empty() {
            "none".into()
        } else {
            counts
        }
    );
    Ok(ExitCode::SUCCESS)
}
