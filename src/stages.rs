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
//! Pure code, no I/O: the due step of every invoice is found from its
//! due date, and [`Stages::windows`] turns "today" into due-date ranges, one
//! per step, that the database scans with its index.

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
    /// Days after the due date this occurrence falls on.
    pub offset: i64,
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
    /// Every occurrence, by offset.
    steps: Vec<Step>,
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
            });
            if let (Some(every), Some(max)) = (stage.repeat_every_days, stage.max_repeats) {
                for k in 1..=max {
                    steps.push(Step {
                        key: StepKey::of(&stage.name, k + 1),
                        stage: i,
                        occurrence: k + 1,
                        offset: first + i64::from(k) * i64::from(every),
                    });
                }
            }
        }
        Self { stages, steps }
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

    /// The step an invoice `age` days past its due date owes (negative:
    /// before it): its latest occurrence on or before today.
    pub fn due_step(&self, age: i64) -> Option<&Step> {
        self.steps.iter().rev().find(|s| s.offset <= age)
    }

    /// The step with this key, if it is one of ours.
    pub fn step(&self, key: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.key == key)
    }

    /// For `today`, the due-date range of each step, oldest due dates (the
    /// latest steps) first, so that scanning them in order walks the
    /// `(due_date, id)` index once from low to high.
    pub fn windows(&self, today: NaiveDate) -> Vec<Window> {
        let shift = |offset: i64| shift(today, -offset);
        let mut windows: Vec<Window> = self
            .steps
            .iter()
            .enumerate()
            .map(|(j, step)| Window {
                step: step.clone(),
                due_from: self.steps.get(j + 1).map(|next| shift(next.offset - 1)),
                due_to: shift(step.offset),
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
mod tests {
    use super::*;

    fn stage(name: &str, days: i32, repeat: Option<(u32, u32)>) -> Stage {
        Stage {
            name: name.into(),
            days,
            template: name.into(),
            repeat_every_days: repeat.map(|r| r.0),
            max_repeats: repeat.map(|r| r.1),
            late_payment: false,
            letter: false,
        }
    }

    fn defaults() -> Stages {
        Stages::new(vec![
            stage("upcoming", -3, None),
            stage("overdue", 3, None),
            stage("final", 21, Some((14, 2))),
        ])
    }

    fn key(stages: &Stages, age: i64) -> Option<String> {
        stages.due_step(age).map(|s| s.key.to_string())
    }

    #[test]
    fn the_due_step_is_the_latest_occurrence_on_or_before_today() {
        let s = defaults();
        assert_eq!(key(&s, -4), None);
        assert_eq!(key(&s, -3).as_deref(), Some("upcoming"));
        assert_eq!(key(&s, 2).as_deref(), Some("upcoming"));
        assert_eq!(key(&s, 3).as_deref(), Some("overdue"));
        assert_eq!(key(&s, 20).as_deref(), Some("overdue"));
        assert_eq!(key(&s, 21).as_deref(), Some("final"));
        assert_eq!(key(&s, 34).as_deref(), Some("final"));
        assert_eq!(key(&s, 35).as_deref(), Some("final-2"));
        assert_eq!(key(&s, 40).as_deref(), Some("final-2"));
        assert_eq!(key(&s, 49).as_deref(), Some("final-3"));
        assert_eq!(key(&s, 5000).as_deref(), Some("final-3"));
    }

    #[test]
    fn repeats_are_numbered_from_two() {
        let s = defaults();
        let step = s.step("final-3").cloned();
        assert_eq!(
            step.map(|s| (s.stage, s.occurrence, s.offset)),
            Some((2, 3, 49))
        );
        assert_eq!(s.step("final-4"), None);
    }

    #[test]
    fn windows_cover_every_due_date_once_and_agree_with_the_due_step() {
        let s = defaults();
        let today = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap_or_default();
        let windows = s.windows(today);
        assert_eq!(windows.first().map(|w| w.due_from), Some(None));
        for age in -10..80 {
            let due = shift(today, -age);
            let inside: Vec<&str> = windows
                .iter()
                .filter(|w| w.due_from.is_none_or(|f| f <= due) && due <= w.due_to)
                .map(|w| w.step.key.as_str())
                .collect();
            let expected: Vec<String> = key(&s, age).into_iter().collect();
            assert_eq!(inside, expected, "age {age}");
        }
        // Oldest due dates first.
        assert!(windows.windows(2).all(|p| p[0].due_to < p[1].due_to));
    }

    #[test]
    fn bad_stage_lists_are_refused_with_the_field() {
        let refused = |list: Vec<Stage>| check(&list).err().map(|(i, f, _)| (i, f));
        assert_eq!(refused(vec![]), Some((None, "")));
        assert_eq!(
            refused(vec![stage("a", 1, None), stage("a", 2, None)]),
            Some((Some(1), "name"))
        );
        assert_eq!(
            refused(vec![stage("final-2", 1, None)]),
            Some((Some(0), "name"))
        );
        assert_eq!(
            refused(vec![stage("a b", 1, None)]),
            Some((Some(0), "name"))
        );
        assert_eq!(
            refused(vec![stage("a", 5, None), stage("b", 5, None)]),
            Some((Some(1), "days"))
        );
        assert_eq!(
            refused(vec![stage("a", 1, Some((7, 2))), stage("b", 9, None)]),
            Some((Some(0), "repeat_every_days"))
        );
        let mut half = stage("a", 1, None);
        half.max_repeats = Some(2);
        assert_eq!(refused(vec![half]), Some((Some(0), "repeat_every_days")));
        assert_eq!(check(&[stage("x-y", 1, Some((1, 1)))]), Ok(()));
    }
}
