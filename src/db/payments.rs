//! Payment signals, the links between payment objects, and the holds they
//! make (`payment_events`, `payment_links`, `payment_holds`).
//!
//! A signal is stored once by its provider's event id, in one transaction
//! with the links it teaches and the hold it changes. Holds are kept per
//! payment object: an invoice is held while any of its objects holds it,
//! and each object's hold follows its newest event by the provider's
//! time, equal times decided by meaning (`Signal::rank`). A signal that
//! finds no invoice is kept with the objects it names and applies when a
//! later event links one of them. The tick reads holds through
//! `owing::withheld!` (its claims and marks), ends paid holds once the
//! books say paid ([`end_booked`]); `explain` reads them with
//! the console's pauses (`pauses::find`); the console and `audit` count them ([`counts`]), and
//! the console lifts them (`console::lift_hold`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::owing::hold_active;
use super::params::Params;
use super::payment_links::Learning;
use crate::domain::{PaymentSignal, Recorded, Signal, SignalOutcome};

/// How many days back an unlinked signal is counted for the operator.
pub const UNLINKED_DAYS: i32 = 7;

/// One object's hold as stored, and whether it holds now.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize, serde::Deserialize)]
pub struct PaymentHold {
    pub invoice_id: String,
    /// The payment object ('' for the generic signal).
    pub object_id: String,
    /// `paid`, `pending`, `disputed`, `lost`, `settled`, `released`,
    /// `lifted` or `booked`.
    pub state: String,
    pub provider: String,
    pub event_id: String,
    pub event_at: DateTime<Utc>,
    /// A pending hold's end.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it last changed (for `booked`: when the books were seen paid).
    pub changed_at: DateTime<Utc>,
    /// Who lifted it in the console.
    pub lifted_by: Option<String>,
    /// Whether it holds the invoice's reminders now.
    pub active: bool,
}

impl PaymentHold {
    /// The order of holds in force: the one an invoice is said to be held
    /// by when several hold it is the strongest. A dispute outranks the
    /// payment it contests (a lost one most), a payment made outranks one
    /// on its way.
    pub fn strength(&self) -> u8 {
        match self.state.as_str() {
            "lost" => 4,
            "disputed" => 3,
            "paid" => 2,
            "pending" => 1,
            _ => 0,
        }
    }
}

/// Invoices held now, by the strongest hold on each, and the signals
/// still waiting for their invoice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HoldCounts {
    pub paid: i64,
    pub pending: i64,
    pub disputed: i64,
    /// Disputes lost, held until an operator lifts them.
    pub lost: i64,
    /// Signals received within [`UNLINKED_DAYS`] that no event has
    /// linked to an invoice yet (not invoices, not in `total`).
    pub unlinked: i64,
}

impl HoldCounts {
    /// Invoices held.
    pub fn total(&self) -> i64 {
        self.paid
            .saturating_add(self.pending)
            .saturating_add(self.disputed)
            .saturating_add(self.lost)
    }
}

/// Stores `signal`, learns its links, and changes the holds it and the
/// earlier signals it links apply to; a pending hold ends `pending_hold`
/// after its event.
pub async fn record(
    db: &Db,
    signal: &PaymentSignal,
    pending_hold: Duration,
) -> Result<Recorded, sqlx::Error> {
    let event = db.statement(
        "INSERT INTO {ir}.payment_events (provider, event_id, signal, invoice_id, object_id, refs, event_at)
         VALUES ($provider, $event_id, $signal, $invoice_id, $object_id, $refs, $at)
         ON CONFLICT (provider, event_id) DO NOTHING",
    );
    let label = signal.signal.map_or(LINK_ONLY, Signal::label);
    let provider = signal.provider;
    let learning = Learning::new(db, provider, &signal.event_id, &signal.links, pending_hold);
    on_db!(db, tx, |c| async {
        let params = Params::default()
            .with("provider", &provider)
            .with("event_id", &signal.event_id)
            .with("signal", &label)
            .with("invoice_id", &signal.invoice_id)
            .with("object_id", &signal.object_id)
            .with("refs", &signal.refs)
            .with("at", &signal.at);
        if event.execute(&mut *c, &params).await?.rows_affected() == 0 {
            return Ok(Recorded {
                outcome: SignalOutcome::Seen,
                linked: 0,
            });
        }
        let applied = learning.apply_on(c).await?;
        let outcome = match (signal.signal, applied.found, applied.held) {
            (None, _, _) => SignalOutcome::Learnt,
            (Some(_), false, _) => SignalOutcome::Unlinked,
            (Some(_), true, true) => SignalOutcome::Stored,
            (Some(_), true, false) => SignalOutcome::Older,
        };
        Ok::<_, sqlx::Error>(Recorded {
            outcome,
            linked: applied.linked,
        })
    }
    .await)
}

/// `payment_events.signal` of an event that only teaches links.
const LINK_ONLY: &str = "link";

/// Ends the paid holds of invoices the source now says are paid
/// (`booked`): the books caught up, so an invoice they reopen later is
/// reminded again. Reads only the paid holds and their source rows by key.
pub async fn end_booked(db: &Db) -> Result<u64, sqlx::Error> {
    let query = db.statement(
        "UPDATE {ir}.payment_holds h SET state = 'booked', changed_at = now()
          WHERE h.state = 'paid'
            AND EXISTS (SELECT 1 FROM {src} s WHERE s.invoice_id::text = h.invoice_id AND s.is_paid)",
    );
    let params = Params::new();
    Ok(on_db!(db, |c| query.execute(&mut *c, &params).await)?.rows_affected())
}

/// The invoices held now, by the strongest hold on each, and the
/// unlinked signals of the last [`UNLINKED_DAYS`].
pub async fn counts(db: &Db) -> Result<HoldCounts, sqlx::Error> {
    let query = db.statement(concat!(
        "SELECT s.state, count(*) FROM (SELECT DISTINCT ON (h.invoice_id) h.invoice_id, h.state",
        " FROM {ir}.payment_holds h WHERE ",
        hold_active!("h"),
        " ORDER BY h.invoice_id, array_position(ARRAY['lost', 'disputed', 'paid', 'pending'], h.state)) s",
        " GROUP BY s.state",
        " UNION ALL SELECT 'unlinked', count(*) FROM {ir}.payment_events e",
        " WHERE e.invoice_id IS NULL AND e.signal <> 'link'",
        " AND e.received_at > now() - make_interval(days => $days)"
    ));
    let params = Params::default().with("days", &UNLINKED_DAYS);
    let rows: Vec<(String, i64)> = on_db!(db, |c| query.fetch_all(&mut *c, &params).await)?;
    let mut counts = HoldCounts::default();
    for (state, n) in rows {
        match state.as_str() {
            "paid" => counts.paid = n,
            "pending" => counts.pending = n,
            "disputed" => counts.disputed = n,
            "lost" => counts.lost = n,
            "unlinked" => counts.unlinked = n,
            _ => {}
        }
    }
    Ok(counts)
}
