//! The console's pauses: an operator holds an invoice (or, in customer
//! mode, every invoice of a customer) back from the tick, or lets it go
//! again, in the worker's own `console_pauses` (the source's pause columns
//! belong to the billing system). A change needs a reason; unpausing can
//! send mail, so it also needs a confirmation. The change and its
//! activity record are one transaction (`db::pauses::pause` / `unpause`).

use anyhow::Context as _;

use super::desk::Desk;
use crate::config::GroupBy;
use crate::db;
use crate::db::activity::NewActivity;
use crate::domain::InvoiceId;

pub use crate::db::pauses::Paused;

/// Pause or unpause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Pause,
    Unpause,
}

impl Change {
    /// The activity log's word for it, and the route's last segment.
    pub fn word(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Unpause => "unpause",
        }
    }
}

/// What a change came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The source does not know the invoice or customer (or the worker is
    /// not in customer mode), or nothing holds it; nothing changed.
    Unknown,
    /// No reason was given; nothing changed.
    NoReason,
    /// An unpause (or a lifted hold) was not confirmed; nothing changed.
    NotConfirmed,
}

impl Outcome {
    /// Why nothing changed, for the person who asked.
    pub fn refusal(self) -> Option<&'static str> {
        match self {
            Self::Done | Self::Unknown => None,
            Self::NoReason => {
                Some("Give a reason: it goes in the activity log. Nothing was changed.")
            }
            Self::NotConfirmed => Some(
                "This can mail the customer at the next tick: tick the box that confirms it. Nothing was changed.",
            ),
        }
    }
}

/// Pauses or unpauses `what` for console user `user`, with `reason`;
/// `confirmed`: the confirmation an unpause needs.
pub async fn change(
    desk: &Desk,
    what: &Paused<'_>,
    change: Change,
    reason: &str,
    confirmed: bool,
    user: &str,
) -> anyhow::Result<Outcome> {
    if !known(desk, what)
        .await
        .context("failed to read the billing source")?
    {
        return Ok(Outcome::Unknown);
    }
    let reason = crate::domain::sanitize(reason, 500);
    if reason.is_empty() {
        return Ok(Outcome::NoReason);
    }
    if change == Change::Unpause && !confirmed {
        return Ok(Outcome::NotConfirmed);
    }
    let subject = what.subject();
    let activity = NewActivity {
        user_name: user,
        action: change.word(),
        subject: &subject,
        reason: Some(&reason),
    };
    match change {
        Change::Pause => db::pauses::pause(desk.db(), what, &activity).await,
        Change::Unpause => db::pauses::unpause(desk.db(), what, &activity)
            .await
            .map(|_| ()),
    }
    .context("failed to change the pause")?;
    Ok(Outcome::Done)
}

/// Whether the source knows `what`.
async fn known(desk: &Desk, what: &Paused<'_>) -> Result<bool, sqlx::Error> {
    match what {
        Paused::Invoice(id) => {
            db::explain::source_rows(desk.db(), &[InvoiceId::from(*id)], &desk.owing_day().await?)
                .await
                .map(|rows| !rows.is_empty())
        }
        Paused::Customer(id) => {
            if desk.settings().reminders.group_by != GroupBy::Customer {
                Ok(false)
            } else {
                db::explain::customer_invoices(desk.db(), id, 1)
                    .await
                    .map(|keys| !keys.is_empty())
            }
        }
    }
}
