//! The overview's two reads that grow with the data, kept for [`MAX_AGE`]:
//! the survey of what is owed today (owed by step, source problems: the
//! survey `audit` and `check-source` run, which reads every owed source
//! row and its reminders) and the last days' reminders by outcome (every
//! reminder of those days). Reads that took less than [`KEEP_SLOWER_THAN`]
//! are not kept, so on a small database every request reads afresh and
//! the page always equals `audit`. The page says when they were read; one
//! request reads them while the others wait for it. `/problems` always surveys
//! afresh, and the overview's other numbers are read at every request
//! (BENCHMARKS.md, "The console at 1M reminders").

use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, Utc};
use tokio::sync::Mutex;

use super::chart;
use crate::operator::desk::Desk;
use crate::operator::overview::DayOutcome;
use crate::operator::survey::OwedStep;

/// How long the overview shows what it read before it reads again.
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// What the overview keeps.
#[derive(Debug, Clone)]
pub struct Kept {
    pub owed: Owed,
    /// The chart's rows (`Desk::days`).
    pub days: Vec<DayOutcome>,
    pub read_at: DateTime<Utc>,
}

/// What the overview shows of one survey.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Owed {
    /// Rows owing a step with no reminder yet (`audit`'s "missing").
    pub new: i64,
    pub by_step: Vec<OwedStep>,
    pub problems: usize,
    /// `source problems: N`, with the bound when the check was cut short.
    pub headline: String,
}

/// Reads faster than this are made again at the next request.
pub const KEEP_SLOWER_THAN: Duration = Duration::from_millis(250);

/// The last reads, for the day they were made.
#[derive(Default)]
pub struct Keeper {
    last: Mutex<Option<(Instant, NaiveDate, Kept)>>,
}

impl Keeper {
    /// Today's reads, at most [`MAX_AGE`] old.
    pub async fn today(&self, desk: &Desk) -> Result<Kept, sqlx::Error> {
        let today = desk.today().await?;
        let mut last = self.last.lock().await;
        if let Some((at, day, kept)) = last.as_ref()
            && *day == today
            && at.elapsed() < MAX_AGE
        {
            return Ok(kept.clone());
        }
        let started = Instant::now();
        let kept = Kept {
            owed: survey(desk).await?,
            days: desk.days(chart::DAYS).await?,
            read_at: Utc::now(),
        };
        *last =
            (started.elapsed() >= KEEP_SLOWER_THAN).then(|| (Instant::now(), today, kept.clone()));
        Ok(kept)
    }
}

/// One survey (`Desk::survey`), and the owed rows by step, counted from
/// its listing when the listing holds them all, else by
/// `Desk::owed_by_step` (the same conditions, counted in full).
async fn survey(desk: &Desk) -> Result<Owed, sqlx::Error> {
    let found = desk.survey().await?;
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
        desk.owed_by_step().await?
    };
    Ok(Owed {
        new: listing.total_new,
        by_step,
        problems: found.problems.count,
        headline: found.problems.headline(),
    })
}
