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
