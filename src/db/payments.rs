//! Payment signals and the holds they make (`payment_events`,
//! `payment_holds`). A signal is stored once by its provider's event id,
//! in one transaction with the hold it changes; a hold follows the newest
//! event by the provider's time, so a late, older event never undoes a
//! newer one. The tick reads holds only through `owing::owes_flags!`;
//! `explain` reads them with the console's pauses (`pauses::find`), the
//! console and `audit` count them here, and the console lifts one
//! (`console::lift_hold`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::owing::hold_active;
use super::params::Params;
use crate::domain::{InvoiceId, PaymentSignal, Signal, SignalOutcome};

/// A hold as stored, and whether it holds now.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize, serde::Deserialize)]
pub struct PaymentHold {
    pub invoice_id: String,
    /// `paid`, `pending`, `disputed`, `released` or `lifted`.
    pub state: String,
    pub provider: String,
    pub event_id: String,
    pub event_at: DateTime<Utc>,
    /// A pending hold's end.
    pub expires_at: Option<DateTime<Utc>>,
    /// Who lifted it in the console.
    pub lifted_by: Option<String>,
    /// Whether it holds the invoice's reminders now.
    pub active: bool,
}

/// Holds that hold now, by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HoldCounts {
    pub paid: i64,
    pub pending: i64,
    pub disputed: i64,
}

impl HoldCounts {
    pub fn total(&self) -> i64 {
        self.paid
            .saturating_add(self.pending)
            .saturating_add(self.disputed)
    }
}

/// Stores `signal` and changes its invoice's hold; a pending hold ends
/// `pending_hold` after the event.
pub async fn record(
    db: &Db,
    signal: &PaymentSignal,
    pending_hold: Duration,
) -> Result<SignalOutcome, sqlx::Error> {
    let find = db.statement(
        "SELECT e.invoice_id FROM {ir}.payment_events e
          WHERE e.provider = $provider AND e.object_id = $linked AND e.invoice_id IS NOT NULL
          ORDER BY e.event_at DESC LIMIT 1",
    );
    let event = db.statement(
        "INSERT INTO {ir}.payment_events (provider, event_id, signal, invoice_id, object_id, event_at)
         VALUES ($provider, $event_id, $signal, $invoice_id, $object_id, $at)
         ON CONFLICT (provider, event_id) DO NOTHING",
    );
    let hold = db.statement(
        "INSERT INTO {ir}.payment_holds AS h (invoice_id, state, provider, event_id, event_at, expires_at)
         VALUES ($invoice_id, $state, $provider, $event_id, $at, $expires_at)
         ON CONFLICT (invoice_id) DO UPDATE SET state = EXCLUDED.state,
                provider = EXCLUDED.provider, event_id = EXCLUDED.event_id,
                event_at = EXCLUDED.event_at, expires_at = EXCLUDED.expires_at,
                changed_at = now(), lifted_by = NULL
          WHERE h.event_at <= EXCLUDED.event_at
            AND NOT (h.state = 'disputed' AND EXCLUDED.state = 'released' AND NOT $ends_dispute)",
    );
    let expires_at: Option<DateTime<Utc>> = match signal.signal {
        Signal::Pending => chrono::Duration::from_std(pending_hold)
            .ok()
            .and_then(|d| signal.at.checked_add_signed(d)),
        _ => None,
    };
    let (provider, state) = (signal.provider, signal.signal.state());
    let (label, ends_dispute) = (signal.signal.label(), signal.signal.ends_dispute());
    on_db!(db, tx, |c| async {
        let mut invoice_id = signal.invoice_id.clone();
        if invoice_id.is_none()
            && let Some(linked) = &signal.linked
        {
            let params = Params::default()
                .with("provider", &provider)
                .with("linked", linked);
            invoice_id = find
                .fetch_optional::<(String,)>(&mut *c, &params)
                .await?
                .map(|(id,)| InvoiceId::from(id.as_str()));
        }
        let Some(invoice_id) = invoice_id else {
            return Ok(SignalOutcome::NoInvoice);
        };
        let params = Params::default()
            .with("provider", &provider)
            .with("event_id", &signal.event_id)
            .with("signal", &label)
            .with("invoice_id", &invoice_id)
            .with("object_id", &signal.object_id)
            .with("at", &signal.at)
            .with("state", &state)
            .with("expires_at", &expires_at)
            .with("ends_dispute", &ends_dispute);
        if event.execute(&mut *c, &params).await?.rows_affected() == 0 {
            return Ok(SignalOutcome::Seen);
        }
        Ok::<_, sqlx::Error>(
            if hold.execute(&mut *c, &params).await?.rows_affected() == 0 {
                SignalOutcome::Older
            } else {
                SignalOutcome::Stored
            },
        )
    }
    .await)
}

/// The holds that hold now, by state.
pub async fn counts(db: &Db) -> Result<HoldCounts, sqlx::Error> {
    let query = db.statement(concat!(
        "SELECT h.state, count(*) FROM {ir}.payment_holds h WHERE ",
        hold_active!("h"),
        " GROUP BY h.state"
    ));
    let params = Params::default();
    let rows: Vec<(String, i64)> = on_db!(db, |c| query.fetch_all(&mut *c, &params).await)?;
    let mut counts = HoldCounts::default();
    for (state, n) in rows {
        match state.as_str() {
            "paid" => counts.paid = n,
            "pending" => counts.pending = n,
            "disputed" => counts.disputed = n,
            _ => {}
        }
    }
    Ok(counts)
}
