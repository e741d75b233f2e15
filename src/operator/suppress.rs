//! The suppression list in the operator's hand (`suppress add|remove`,
//! the console's Suppressions page; the bounce webhook adds to it too).
//! An address is checked before anything is written; a console user's
//! change is written with its activity record in the same transaction.

use super::desk::Desk;
use super::{Actor, UsageError};
use crate::db;
use crate::db::activity::NewActivity;
use crate::db::suppressions::NewSuppression;
pub use crate::db::suppressions::{Added, SkippedRow, Suppression};

/// The reason stored when none is given.
pub const DEFAULT_REASON: &str = "manual";

/// An address that parses as an email address, trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address(String);

impl Address {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `address` as an email address (trimmed), or a usage error naming it.
pub fn checked(address: &str) -> Result<Address, UsageError> {
    let trimmed = address.trim();
    trimmed
        .parse::<lettre::Address>()
        .map(|a| Address(a.to_string()))
        .map_err(|e| {
            UsageError(format!(
                "{:?} is not an email address: {e}",
                crate::domain::sanitize(trimmed, 100)
            ))
        })
}

/// The reason to store: `given`, cleaned, or [`DEFAULT_REASON`].
pub fn reason(given: Option<&str>) -> String {
    given
        .map(|r| crate::domain::sanitize(r, 500))
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| DEFAULT_REASON.to_owned())
}

/// Adds `address` to the list with `reason` (or replaces its reason).
pub async fn add(
    desk: &Desk,
    address: &Address,
    reason: &str,
    actor: Actor<'_>,
) -> Result<Added, sqlx::Error> {
    let entry = NewSuppression {
        address: address.as_str(),
        reason,
        source: match actor {
            Actor::CommandLine => "cli",
            Actor::Console(_) => "console",
        },
        detail: None,
    };
    let activity = actor.user().map(|user| NewActivity {
        user_name: user,
        action: "suppress",
        subject: address.as_str(),
        reason: Some(reason),
    });
    db::suppressions::add(desk.db(), entry, activity.as_ref()).await
}

/// Takes `address` off the list; false when it was not listed (and a
/// console user's change then leaves no record).
pub async fn remove(desk: &Desk, address: &Address, actor: Actor<'_>) -> Result<bool, sqlx::Error> {
    let activity = actor.user().map(|user| NewActivity {
        user_name: user,
        action: "unsuppress",
        subject: address.as_str(),
        reason: None,
    });
    db::suppressions::remove(desk.db(), address.as_str(), activity.as_ref()).await
}

impl Desk {
    /// The whole suppression list, newest first.
    pub async fn suppressions(&self) -> Result<Vec<Suppression>, sqlx::Error> {
        db::suppressions::list(self.db()).await
    }

    /// Reminders recorded `skipped` because their recipients are
    /// suppressed: how many, and the latest `limit`.
    pub async fn skipped(&self, limit: i64) -> Result<(i64, Vec<SkippedRow>), sqlx::Error> {
        db::suppressions::skipped(self.db(), limit).await
    }
}
