//! The step key: the name one step of a reminder stage is stored under
//! (`overdue`, `final`, `final-2`), in the column `reminders.period`. One
//! type wherever the key travels, so a step key is never mistaken for a
//! stage name, a locale or a template.

use std::fmt;

/// A step's key, as `reminders.period` stores it.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, sqlx::Type, serde::Serialize,
)]
#[sqlx(transparent)]
#[serde(transparent)]
pub struct StepKey(pub String);

impl StepKey {
    /// The key of a stage's `occurrence` (1 for the first): the stage's
    /// name, then `-2`, `-3`, ... for its repeats (`final`, `final-2`).
    pub fn of(stage: &str, occurrence: u32) -> Self {
        match occurrence {
            0 | 1 => Self(stage.to_owned()),
            n => Self(format!("{stage}-{n}")),
        }
    }

    /// Whether `name` ends the way a repeat's key does (`-<digits>`), so a
    /// stage by that name could not be told from another stage's repeat.
    pub fn reads_as_a_repeat(name: &str) -> bool {
        name.rsplit_once('-').is_some_and(|(_, suffix)| {
            !suffix.is_empty() && suffix.chars().all(|c| c.is_ascii_digit())
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for StepKey {
    fn from(key: &str) -> Self {
        Self(key.to_owned())
    }
}

impl From<String> for StepKey {
    fn from(key: String) -> Self {
        Self(key)
    }
}

impl PartialEq<str> for StepKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for StepKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for StepKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_is_its_stage_name_and_its_occurrence() {
        assert_eq!(StepKey::of("final", 1), "final");
        assert_eq!(StepKey::of("final", 3), "final-3");
        assert!(StepKey::reads_as_a_repeat("final-2"));
        assert!(!StepKey::reads_as_a_repeat("pre-due"));
        assert!(!StepKey::reads_as_a_repeat("final-"));
    }
}
