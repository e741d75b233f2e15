//! Payment holds in the operator's hand: a console user lifts the hold a
//! payment signal put on an invoice (a dispute settled outside the
//! provider, a signal sent in error). Like unpausing, it needs a reason and
//! a confirmation, since the next tick may mail the customer; the change
//! and its activity record are one transaction (`db::payments::lift`). A
//! newer signal from the provider holds the invoice again.

use anyhow::Context as _;

use super::desk::Desk;
use super::pause::Outcome;
use crate::db;
use crate::db::activity::NewActivity;
pub use crate::db::payments::{HoldCounts, UNLINKED_DAYS};
use crate::domain::InvoiceId;

/// Lifts the hold on invoice `id` for console user `user`, with `reason`;
/// `confirmed`: the confirmation it needs. [`Outcome::Unknown`] when
/// nothing holds the invoice.
pub async fn lift(
    desk: &Desk,
    id: &InvoiceId,
    reason: &str,
    confirmed: bool,
    user: &str,
) -> anyhow::Result<Outcome> {
    let reason = crate::domain::sanitize(reason, 500);
    if reason.is_empty() {
        return Ok(Outcome::NoReason);
    }
    if !confirmed {
        return Ok(Outcome::NotConfirmed);
    }
    let subject = format!("invoice {id}");
    let activity = NewActivity {
        user_name: user,
        action: "lift hold",
        subject: &subject,
        reason: Some(&reason),
    };
    let lifted = db::payments::lift(desk.db(), id, &activity)
        .await
        .context("failed to lift the payment hold")?;
    Ok(if lifted {
        Outcome::Done
    } else {
        Outcome::Unknown
    })
}

impl Desk {
    /// Invoices held now, by the strongest hold on each, and the signals
    /// still waiting for their invoice.
    pub async fn holds(&self) -> Result<HoldCounts, sqlx::Error> {
        db::payments::counts(self.db()).await
    }
}
