//! Reminder stages: which step an invoice owes on a given day.
//!
//! A stage fires `days` after the due date (negative: before it). The last
//! stage may repeat: with `repeat_every_days = R` and `max_repeats = M` it
//! fires M more times, R days apart, keyed `name-2` ... `name-(M+1)`. The
//! **due step** of an unpaid invoice is its latest occurrence on or before
//! today; only that step is ever claimed, so after downtime an invoice gets
//! the step it is at, never the ones it skipped. The step's key is the
//! `period` of the claim: UNIQUE (invoice_id, period) means "each step at
//! most once per invoice".
//!
//! A stage with `business_days = true` counts its days (and its repeats)
//! in open days ([`OpenDays`]: `send_window.days` that are not holidays
//! of `send_window.calendar`): due on Friday 15 January 2027 with days
//! Mon-Fri, 1 business day is Monday 18 and 3 is Wednesday 20. The due
//! step is then the last step in list order whose day has come.
//!
//! Pure code, no I/O: the due step of every invoice is found from its
//! due date, and [`Stages::windows`] turns "today" into due-date ranges, one
//! per step, that the database scans with its index.

pub use crate::domain::OpenDays;

mod local;
pub use local::{LocalWindow, LocalWindows, local_days};

use chrono::{Days, NaiveDate};
use serde::Deserialize;

use crate::domain::StepKey;

/// One `[[reminders.stages]]` entry, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    /// The step key of its first occurrence (`reminders.period`).
    pub name: String,
    /// Days after the due date (negative: before it).
    pub days: i32,
    /// Template name: `{locale}/{template}.subject.j2`, `.txt.j2`, `.html.j2`.
    pub template: String,
    pub repeat_every_days: Option<u32>,
    pub max_repeats: Option<u32>,
    /// Its mail claims late-payment interest and compensation
    /// (`late_payment.regime`; docs/late-payment.md).
    #[serde(default)]
    pub late_payment: bool,
    /// Its mail attaches the claim as a PDF letter (needs `late_payment`).
    #[serde(default)]
    pub letter: bool,
    /// `days` (and `repeat_every_days`) count open days ([`OpenDays`]),
    /// not calendar days.
    #[serde(default)]
    pub business_days: bool,
}

/// One occurrence of a stage: what a claim is for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    /// `overdue`, `final`, `final-2`: stored in `reminders.period`.
    pub key: StepKey,
    /// Index into the stage list.
    #[serde(skip)]
    pub stage: usize,
    /// 1 for the stage's first occurrence, 2 for its first repeat, ...
    pub occurrence: u32,
    /// Days after the due date this occurrence falls on: open days when
    /// `business`.
    pub offset: i64,
    /// Its stage counts business days.
    #[serde(skip)]
    pub business: bool,
}

/// The due-date range whose invoices owe `step` today (both ends included;
/// `due_from` None: no lower bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub step: Step,
    pub due_from: Option<NaiveDate>,
    pub due_to: NaiveDate,
}

/// The validated stage list (see `config::validate`): names unique and
/// usable as keys, days strictly increasing, only the last stage repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stages {
    stages: Vec<Stage>,
    /// Every occurrence, in list order.
    steps: Vec<Step>,
    /// The days business-day stages count.
    open: OpenDays,
}

impl Stages {
    /// Builds the list; `config::validate` has checked the rules.
    pub fn new(stages: Vec<Stage>) -> Self {
        let mut steps = Vec::new();
        for (i, stage) in stages.iter().enumerate() {
            let first = i64::from(stage.days);
            steps.push(Step {
                key: StepKey::of(&stage.name, 1),
                stage: i,
                occurrence: 1,
                offset: first,
                business: stage.business_days,
            });
            if let (Some(every), Some(max)) = (stage.repeat_every_days, stage.max_repeats) {
                for k in 1..=max {
                    steps.push(Step {
                        key: StepKey::of(&stage.name, k + 1),
                        stage: i,
                        occurrence: k + 1,
                        offset: first + i64::from(k) * i64::from(every),
                        business: stage.business_days,
                    });
                }
            }
        }
        Self {
            stages,
            steps,
            open: OpenDays::default(),
        }
    }

    /// The same stages, business-day ones counting `open`.
    pub fn counting(mut self, open: OpenDays) -> Self {
        self.open = open;
        self
    }

    /// The day `step` falls on for an invoice due on `due`.
    pub fn date_of(&self, step: &Step, due: NaiveDate) -> NaiveDate {
        if step.business {
            self.open.add(due, step.offset)
        } else {
            shift(due, step.offset)
        }
    }

    /// The latest due date whose `step` has come by `today`.
    pub fn latest_due(&self, step: &Step, today: NaiveDate) -> NaiveDate {
        if step.business {
            self.open.latest_due(today, step.offset)
        } else {
            shift(today, -step.offset)
        }
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    pub fn stage(&self, step: &Step) -> &Stage {
        &self.stages[step.stage]
    }

    /// The keys of the steps whose stage claims late payment.
    pub fn late_payment_keys(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter(|s| self.stage(s).late_payment)
            .map(|s| s.key.to_string())
            .collect()
    }

    /// Every step, earliest first.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The step an invoice due on `due` owes on `today`: the last step,
    /// in list order, whose day has come.
    pub fn due_step(&self, due: NaiveDate, today: NaiveDate) -> Option<&Step> {
        self.steps
            .iter()
            .rev()
            .find(|s| self.date_of(s, due) <= today)
    }

    /// The step with this key, if it is one of ours.
    pub fn step(&self, key: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.key == key)
    }

    /// For `today`, the due-date range of each step, oldest due dates (the
    /// latest steps) first, so that scanning them in order walks the
    /// `(due_date, id)` index once from low to high.
    pub fn windows(&self, today: NaiveDate) -> Vec<Window> {
        // Step j is due for the due dates up to its latest and after every
        // later step's latest: one range, as counting is monotone.
        let latest: Vec<NaiveDate> = self
            .steps
            .iter()
            .map(|s| self.latest_due(s, today))
            .collect();
        let mut windows: Vec<Window> = self
            .steps
            .iter()
            .enumerate()
            .map(|(j, step)| Window {
                step: step.clone(),
                due_from: latest
                    .get(j + 1..)
                    .and_then(|later| later.iter().max())
                    .map(|d| shift(*d, 1)),
                due_to: latest.get(j).copied().unwrap_or(today),
            })
            .collect();
        windows.reverse();
        windows
    }
}

/// `date + days`, saturating at chrono's range.
pub fn shift(date: NaiveDate, days: i64) -> NaiveDate {
    let magnitude = Days::new(days.unsigned_abs());
    let moved = if days >= 0 {
        date.checked_add_days(magnitude)
    } else {
        date.checked_sub_days(magnitude)
    };
    moved.unwrap_or(if days >= 0 {
        NaiveDate::MAX
    } else {
        NaiveDate::MIN
    })
}

/// Why a stage list cannot be used: (index, field, reason).
pub fn check(stages: &[Stage]) -> Result<(), (Option<usize>, &'static str, String)> {
    if stages.is_empty() {
        return Err((None, "", "at least one stage is needed".into()));
    }
    let key_like = |s: &str| {
        !s.is_empty()
            && s.len() <= 40
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    for (i, stage) in stages.iter().enumerate() {
        if !key_like(&stage.name) {
            return Err((
                Some(i),
                "name",
                format!(
                    "{:?} is not usable as a key: 1-40 characters from letters, digits, '-' and '_'",
                    stage.name
                ),
            ));
        }
        if StepKey::reads_as_a_repeat(&stage.name) {
            return Err((
                Some(i),
                "name",
                format!(
                    "{:?} ends in -<digits>, which repeats use (\"final-2\" is the second \"final\")",
                    stage.name
                ),
            ));
        }
        if stages[..i].iter().any(|s| s.name == stage.name) {
            return Err((Some(i), "name", format!("{:?} is used twice", stage.name)));
        }
        if !key_like(&stage.template) {
            return Err((
                Some(i),
                "template",
                format!(
                    "{:?} is not a template name: letters, digits, '-' and '_'",
                    stage.template
                ),
            ));
        }
        if !(-3650..=3650).contains(&stage.days) {
            return Err((Some(i), "days", "must be between -3650 and 3650".into()));
        }
        if i > 0 && stage.days <= stages[i - 1].days {
            return Err((
                Some(i),
                "days",
                format!(
                    "must be greater than the previous stage's ({} = {}): stages are listed in the order they fire",
                    stages[i - 1].name,
                    stages[i - 1].days
                ),
            ));
        }
        if stage.letter && !stage.late_payment {
            return Err((
                Some(i),
                "letter",
                "a letter states a late-payment claim: set late_payment = true too".into(),
            ));
        }
        match (stage.repeat_every_days, stage.max_repeats) {
            (None, None) => {}
            (Some(_), None) | (None, Some(_)) => {
                return Err((
                    Some(i),
                    "repeat_every_days",
                    "repeat_every_days and max_repeats go together".into(),
                ));
            }
            (Some(_), Some(_)) if i + 1 < stages.len() => {
                return Err((
                    Some(i),
                    "repeat_every_days",
                    "only the last stage may repeat".into(),
                ));
            }
            (Some(every), Some(max)) if every == 0 || max == 0 || max > 1000 => {
                return Err((
                    Some(i),
                    "repeat_every_days",
                    "repeat_every_days must be at least 1 and max_repeats between 1 and 1000"
                        .into(),
                ));
            }
            (Some(_), Some(_)) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
