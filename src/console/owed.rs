//! The overview's survey of what is owed today (owed by step, source
//! problems): the survey `audit` and `check-source` run, which reads every
//! owed source row and its reminders, so at 1M reminders it costs a
//! second or more (BENCHMARKS.md). The overview keeps its result for
//! [`MAX_AGE`] and says how old it is; one request computes it while the
//! others wait for that one. `/problems` always surveys afresh.

use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, Utc};
use tokio::sync::Mutex;

use crate::commands;
use crate::config::Settings;
use crate::db::Db;
use crate::db::owed::{OwedStep, owed_by_step};
use crate::db::owing::Today;

/// How long the overview shows a survey before it surveys again.
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// What the overview shows of one survey.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Owed {
    /// Rows owing a step with no reminder yet (`audit`'s "missing").
    pub new: i64,
    pub by_step: Vec<OwedStep>,
    pub problems: usize,
    /// `source problems: N`, with the bound when the check was cut short.
    pub headline: String,
    pub surveyed_at: DateTime<Utc>,
}

/// The last survey, for the day it was made.
#[derive(Default)]
pub struct Survey {
    last: Mutex<Option<(Instant, NaiveDate, Owed)>>,
}

impl Survey {
    /// Today's survey, at most [`MAX_AGE`] old.
    pub async fn today(
        &self,
        db: &Db,
        settings: &Settings,
        today: NaiveDate,
    ) -> Result<Owed, sqlx::Error> {
        let mut last = self.last.lock().await;
        if let Some((at, day, owed)) = last.as_ref()
            && *day == today
            && at.elapsed() < MAX_AGE
        {
            return Ok(owed.clone());
        }
        let owed = survey(db, settings, today).await?;
        *last = Some((Instant::now(), today, owed.clone()));
        Ok(owed)
    }
}

/// One survey: `commands::survey`, and the owed rows by step, counted
/// from its listing when the listing holds them all, else by
/// `db::owed::owed_by_step` (the same conditions, counted in full).
async fn survey(db: &Db, settings: &Settings, today: NaiveDate) -> Result<Owed, sqlx::Error> {
    let found = commands::survey(db, settings, today).await?;
    let listing = &found.owed;
    let complete = usize::try_from(listing.total).is_ok_and(|t| t == listing.rows.len());
    let by_step = if complete {
        let mut steps: std::collections::BTreeMap<&str, OwedStep> = Default::default();
        for row in &listing.rows {
            let step = steps.entry(row.step.as_str()).or_insert_with(|| OwedStep {
                step: row.step.clone(),
                new: 0,
                retries: 0,
            });
            if row.kind == "new" {
                step.new = step.new.saturating_add(1);
            } else {
                step.retries = step.retries.saturating_add(1);
            }
        }
        steps.into_values().collect()
    } else {
        let owing = Today::from_settings(settings, today);
        owed_by_step(db, &owing, settings.reminders.max_attempts).await?
    };
    Ok(Owed {
        new: listing.total_new,
        by_step,
        problems: found.problems.count,
        headline: found.problems.headline(),
        surveyed_at: Utc::now(),
    })
}
