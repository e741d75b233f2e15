//! What is owed today, as the operator surveys it (`audit`,
//! `check-source`, `run-once --dry-run`, the console's overview and
//! Problems page): the rows that owe a step, and
//! among them the source problems, by the same rules a tick applies
//! (`crate::problems`).
//!
//! Cost: one pass over the owed rows (`db::owed::owed_listing`: the source
//! joined with the reminders, counted in full, the first
//! [`ROWS_CHECKED`] returned with one lookup of their key each, to see
//! repeats), and one query for the rows without a key or a due date (at
//! most [`UNUSABLE_CHECKED`]). Problems among owed rows past the first
//! [`ROWS_CHECKED`] are not seen (the headline says so).

use super::desk::Desk;
use crate::config::Settings;
pub use crate::db::owed::{OwedListing, OwedStep};
use crate::db::owing::OwingDay;
use crate::db::{self, Db};
use crate::domain::SourceProblem;
use crate::problems;

/// Owed rows checked at most.
pub const ROWS_CHECKED: u32 = 10_000;
/// Rows without a key or a due date checked at most.
const UNUSABLE_CHECKED: u32 = 1_000;
/// Problems listed at most (all found are counted).
const LISTED: usize = 100;

/// What to do about a source problem, as `audit` and `check-source` say
/// it under their listing and the console under its own.
pub const FIX_HINT: &str = "these rows get no reminder until fixed in source.relation (README, \"Using your own invoices\")";

/// What the check found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SourceProblems {
    /// Problems found (one per repeated key, one per other bad row).
    pub count: usize,
    /// The first of them.
    pub listed: Vec<SourceProblem>,
    /// Owed rows checked; when it reaches [`ROWS_CHECKED`], more rows were
    /// not checked.
    pub rows_checked: usize,
}

impl SourceProblems {
    /// "source problems: 3" and, when the check was cut short, by what.
    pub fn headline(&self) -> String {
        let bounded = self.rows_checked >= ROWS_CHECKED as usize;
        format!(
            "source problems: {}{}",
            self.count,
            if bounded {
                format!(" (among the first {ROWS_CHECKED} owed rows)")
            } else {
                String::new()
            }
        )
    }

    /// The headline, then one line per listed problem.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![self.headline()];
        lines.extend(self.listed.iter().map(|p| format!("  {p}")));
        if self.count > self.listed.len() {
            lines.push(format!(
                "  ... and {} more",
                self.count.saturating_sub(self.listed.len())
            ));
        }
        if self.count > 0 {
            lines.push(format!("  {FIX_HINT}"));
        }
        lines
    }
}

/// What is owed today and which of it cannot be sent.
#[derive(Debug, Clone, Default)]
pub struct Survey {
    pub owed: OwedListing,
    pub problems: SourceProblems,
}

/// Surveys today's owed rows (new and retries).
async fn survey_on(db: &Db, settings: &Settings, owing: OwingDay) -> Result<Survey, sqlx::Error> {
    let reminders = &settings.reminders;
    let listing = db::owed::owed_listing(db, &owing, reminders.max_attempts, ROWS_CHECKED).await?;
    let rows_checked = listing.rows.len();
    let mut found = problems::list(
        listing.rows.iter().map(|r| (r.row.clone(), r.copies)),
        db.names().reads_customer(),
        &settings.send_window.calendars,
    );
    if let Some(due_by) = owing.due_by() {
        let unusable = db::owed::unusable_rows(db, due_by, UNUSABLE_CHECKED).await?;
        // NULL keys among the owed rows were found above already.
        found.extend(
            unusable
                .into_iter()
                .filter(|r| r.due_date.is_none())
                .filter_map(|r| r.into_parts().err()),
        );
    }
    Ok(Survey {
        owed: listing,
        problems: SourceProblems {
            count: found.len(),
            listed: found.into_iter().take(LISTED).collect(),
            rows_checked,
        },
    })
}

impl Desk {
    /// Surveys today's owed rows (new and retries) and their problems.
    pub async fn survey(&self) -> Result<Survey, sqlx::Error> {
        survey_on(self.db(), self.settings(), self.owing_day().await?).await
    }

    /// Today's owed reminders by step, counted in full (the survey's
    /// listing stops at [`ROWS_CHECKED`]).
    pub async fn owed_by_step(&self) -> Result<Vec<OwedStep>, sqlx::Error> {
        let owing = self.owing_day().await?;
        db::owed::owed_by_step(self.db(), &owing, self.settings().reminders.max_attempts).await
    }
}
