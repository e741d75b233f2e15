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
use sqlx::types::Json;

use super::Db;
use super::activity::{NewActivity, record_on};
use super::conn::on_db;
use super::owing::hold_active;
use super::params::Params;
use super::payment_links::{Learning, Linked};
use crate::domain::{InvoiceId, PaymentLink, PaymentSignal, Recorded, Signal, SignalOutcome};

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
    let learning = Learning::new(db, provider, &signal.event_id, &signal.links);
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
        let found = learning.find_on(c).await?;
        let applied = apply_on(
            c,
            db,
            provider,
            &signal.event_id,
            &found.events,
            pending_hold,
        )
        .await?;
        let outcome = match (signal.signal, found.this, applied.held) {
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

/// Learns `links` (a lookup's answer at `provider`) and applies every
/// unlinked signal they let find its invoice; how many did.
pub async fn learn(
    db: &Db,
    provider: &'static str,
    links: &[PaymentLink],
    pending_hold: Duration,
) -> Result<u64, sqlx::Error> {
    let learning = Learning::new(db, provider, "", links);
    on_db!(db, tx, |c| async {
        let found = learning.find_on(c).await?;
        let applied = apply_on(c, db, provider, "", &found.events, pending_hold).await?;
        Ok::<_, sqlx::Error>(applied.linked)
    }
    .await)
}

/// Applies events to their objects' holds: each object's newest event by
/// time, then meaning, wins, and only over an older one.
const APPLY: &str = "WITH v AS (
         SELECT * FROM unnest($ids::text[], $invoices::text[], $objects::text[], $states::text[],
                              $ranks::int2[], $ats::timestamptz[])
                    AS v(event_id, invoice_id, object_id, state, rank, at)
     ), linked AS (
         UPDATE {ir}.payment_events e SET invoice_id = v.invoice_id FROM v
          WHERE e.provider = $provider AND e.event_id = v.event_id AND e.invoice_id IS NULL
         RETURNING e.event_id
     ), held AS (
         INSERT INTO {ir}.payment_holds AS h
                (invoice_id, provider, object_id, state, rank, event_id, event_at, expires_at)
         SELECT DISTINCT ON (v.invoice_id, v.object_id) v.invoice_id, $provider, v.object_id,
                v.state, v.rank, v.event_id, v.at,
                CASE WHEN v.state = 'pending' THEN v.at + make_interval(secs => $pending_secs) END
           FROM v WHERE v.state IS NOT NULL
          ORDER BY v.invoice_id, v.object_id, v.at DESC, v.rank DESC
         ON CONFLICT (invoice_id, provider, object_id) DO UPDATE
            SET state = EXCLUDED.state, rank = EXCLUDED.rank, event_id = EXCLUDED.event_id,
                event_at = EXCLUDED.event_at, expires_at = EXCLUDED.expires_at,
                changed_at = now(), lifted_by = NULL
          WHERE (h.event_at, h.rank) < (EXCLUDED.event_at, EXCLUDED.rank)
         RETURNING h.event_id
     )
     SELECT (SELECT count(*) FROM linked WHERE event_id <> $event_id),
            EXISTS (SELECT 1 FROM held WHERE event_id = $event_id)";

/// What applying did.
#[derive(Debug, Clone, Copy, Default)]
struct Applied {
    /// The event `event_id`'s object's hold now says what it says.
    held: bool,
    /// Other events that found their invoice.
    linked: u64,
}

/// Applies `events` (each with its invoice) to their objects' holds on
/// `c`, and notes each event's invoice.
async fn apply_on(
    c: &mut sqlx::PgConnection,
    db: &Db,
    provider: &'static str,
    event_id: &str,
    events: &[Linked],
    pending_hold: Duration,
) -> Result<Applied, sqlx::Error> {
    if events.is_empty() {
        return Ok(Applied::default());
    }
    let mut v = ToApply::default();
    for e in events {
        v.ids.push(e.event_id.clone());
        v.invoices.push(e.invoice_id.clone());
        v.objects.push(e.object_id.clone());
        v.states.push(e.signal.map(Signal::state));
        v.ranks.push(e.signal.map_or(0, Signal::rank));
        v.ats.push(e.at);
    }
    let (event_id, pending_secs) = (event_id.to_owned(), pending_hold.as_secs_f64());
    let params = Params::default()
        .with("provider", &provider)
        .with("event_id", &event_id)
        .with("ids", &v.ids)
        .with("invoices", &v.invoices)
        .with("objects", &v.objects)
        .with("states", &v.states)
        .with("ranks", &v.ranks)
        .with("ats", &v.ats)
        .with("pending_secs", &pending_secs);
    let (linked, held): (i64, bool) = db.statement(APPLY).fetch_one(&mut *c, &params).await?;
    Ok(Applied {
        held,
        linked: u64::try_from(linked).unwrap_or(0),
    })
}

/// Events to apply, laid out as the apply statement reads them.
#[derive(Default)]
struct ToApply {
    ids: Vec<String>,
    invoices: Vec<String>,
    objects: Vec<String>,
    states: Vec<Option<&'static str>>,
    ranks: Vec<i16>,
    ats: Vec<DateTime<Utc>>,
}

/// `payment_events.signal` of an event that only teaches links.
const LINK_ONLY: &str = "link";

/// Every payment object's hold on the invoices `ids`, and, in the same
/// statement (a page reads it once), the console pauses of the invoices
/// and of `customer` (`pauses::holding` picks the one that holds an
/// invoice back).
pub async fn with_pauses(
    db: &Db,
    ids: &[InvoiceId],
    customer: Option<&str>,
) -> Result<(Vec<super::pauses::ConsolePause>, Vec<PaymentHold>), sqlx::Error> {
    let query = db.statement(concat!(
        "SELECT (SELECT coalesce(json_agg(p), '[]') FROM (",
        "SELECT invoice_id, customer_id, reason, paused_by, paused_at FROM {ir}.console_pauses",
        " WHERE invoice_id = ANY($ids) OR customer_id = $customer) p),",
        " (SELECT coalesce(json_agg(h), '[]') FROM (",
        "SELECT h.invoice_id, h.object_id, h.state, h.provider, h.event_id, h.event_at,",
        " h.expires_at, h.changed_at, h.lifted_by, (",
        hold_active!("h"),
        ") AS active FROM {ir}.payment_holds h WHERE h.invoice_id = ANY($ids)",
        " ORDER BY h.invoice_id, h.event_at, h.object_id) h)"
    ));
    let customer = customer.map(str::to_owned);
    let params = Params::new().with("ids", &ids).with("customer", &customer);
    let (Json(pauses), Json(holds)): (
        Json<Vec<super::pauses::ConsolePause>>,
        Json<Vec<PaymentHold>>,
    ) = on_db!(db, |c| query.fetch_one(&mut *c, &params).await)?;
    Ok((pauses, holds))
}

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

/// Lifts the payment hold of invoice `id` for a console user, with `activity`, in
/// one transaction; false (and no record) when nothing held it.
pub async fn lift(
    db: &Db,
    id: &InvoiceId,
    activity: &NewActivity<'_>,
) -> Result<bool, sqlx::Error> {
    let query = db.statement(concat!(
        "UPDATE {ir}.payment_holds h SET state = 'lifted', lifted_by = $user, changed_at = now()",
        " WHERE h.invoice_id = $id AND ",
        hold_active!("h")
    ));
    let user = activity.user_name.to_owned();
    let params = Params::default().with("id", &id).with("user", &user);
    on_db!(db, tx, |c| async {
        let lifted = query.execute(&mut *c, &params).await?.rows_affected() > 0;
        if lifted {
            record_on(c, db, activity, &[]).await?;
        }
        Ok::<_, sqlx::Error>(lifted)
    }
    .await)
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
