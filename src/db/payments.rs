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
use crate::domain::{LinkTo, PaymentSignal, Recorded, Signal, SignalOutcome};

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

/// SQL: the invoice that the event `$e`'s objects (`refs`, in order) lead
/// to through what was learnt, three links deep at most (a Charge, its
/// PaymentIntent, its Stripe invoice, our invoice); NULL if none.
macro_rules! found_through_links {
    ($e:literal) => {
        concat!(
            "(SELECT COALESCE(l1.invoice_id, l2.invoice_id, l3.invoice_id)",
            " FROM unnest(",
            $e,
            ".refs) WITH ORDINALITY r(id, ord)",
            " JOIN {ir}.payment_links l1 ON l1.provider = $provider AND l1.object_id = r.id",
            " LEFT JOIN {ir}.payment_links l2 ON l2.provider = $provider AND l2.object_id = l1.via",
            " LEFT JOIN {ir}.payment_links l3 ON l3.provider = $provider AND l3.object_id = l2.via",
            " WHERE COALESCE(l1.invoice_id, l2.invoice_id, l3.invoice_id) IS NOT NULL",
            " ORDER BY r.ord LIMIT 1)"
        )
    };
}

/// One event to apply: the event, its invoice, its object and signal.
#[derive(Debug, FromRow)]
struct Found {
    event_id: String,
    signal: String,
    object_id: Option<String>,
    event_at: DateTime<Utc>,
    invoice_id: Option<String>,
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
    let learn = db.statement(
        "INSERT INTO {ir}.payment_links AS p (provider, object_id, invoice_id, via, event_id)
         SELECT DISTINCT ON (l.object_id) $provider, l.object_id, l.invoice_id, l.via, $event_id
           FROM unnest($link_objects::text[], $link_invoices::text[], $link_vias::text[])
                AS l(object_id, invoice_id, via)
          ORDER BY l.object_id
         ON CONFLICT (provider, object_id) DO UPDATE
            SET invoice_id = COALESCE(p.invoice_id, EXCLUDED.invoice_id),
                via = COALESCE(p.via, EXCLUDED.via)
          WHERE (p.invoice_id IS NULL AND EXCLUDED.invoice_id IS NOT NULL)
             OR (p.via IS NULL AND EXCLUDED.via IS NOT NULL)
         RETURNING p.object_id",
    );
    let find = db.statement(concat!(
        "WITH down AS (",
        " SELECT unnest($learnt::text[]) AS id",
        " UNION SELECT l1.object_id FROM {ir}.payment_links l1",
        "  WHERE l1.provider = $provider AND l1.via = ANY($learnt)",
        " UNION SELECT l2.object_id FROM {ir}.payment_links l1",
        "  JOIN {ir}.payment_links l2 ON l2.provider = $provider AND l2.via = l1.object_id",
        "  WHERE l1.provider = $provider AND l1.via = ANY($learnt)",
        "), candidates AS (",
        " SELECT e.* FROM {ir}.payment_events e WHERE e.provider = $provider AND e.event_id = $event_id",
        " UNION ALL SELECT e.* FROM {ir}.payment_events e",
        "  WHERE e.provider = $provider AND e.invoice_id IS NULL AND e.event_id <> $event_id",
        "    AND cardinality($learnt::text[]) > 0 AND e.refs && ARRAY(SELECT id FROM down)",
        ")",
        " SELECT c.event_id, c.signal, c.object_id, c.event_at,",
        " COALESCE(c.invoice_id, ",
        found_through_links!("c"),
        ") AS invoice_id FROM candidates c"
    ));
    let apply = db.statement(
        "WITH v AS (
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
                EXISTS (SELECT 1 FROM held WHERE event_id = $event_id)",
    );
    let label = signal.signal.map_or(LINK_ONLY, Signal::label);
    let (mut link_objects, mut link_invoices, mut link_vias) = (vec![], vec![], vec![]);
    for link in &signal.links {
        let (invoice, via) = match &link.to {
            LinkTo::Invoice(id) => (Some(id.as_str().to_owned()), None),
            LinkTo::Object(o) if *o == link.object => continue,
            LinkTo::Object(o) => (None, Some(o.clone())),
        };
        link_objects.push(link.object.clone());
        link_invoices.push(invoice);
        link_vias.push(via);
    }
    let pending_secs = pending_hold.as_secs_f64();
    let provider = signal.provider;
    on_db!(db, tx, |c| async {
        let params = Params::default()
            .with("provider", &provider)
            .with("event_id", &signal.event_id)
            .with("signal", &label)
            .with("invoice_id", &signal.invoice_id)
            .with("object_id", &signal.object_id)
            .with("refs", &signal.refs)
            .with("at", &signal.at)
            .with("link_objects", &link_objects)
            .with("link_invoices", &link_invoices)
            .with("link_vias", &link_vias);
        if event.execute(&mut *c, &params).await?.rows_affected() == 0 {
            return Ok(Recorded {
                outcome: SignalOutcome::Seen,
                linked: 0,
            });
        }
        let learnt: Vec<String> = if link_objects.is_empty() {
            Vec::new()
        } else {
            learn
                .fetch_all::<(String,)>(&mut *c, &params)
                .await?
                .into_iter()
                .map(|(o,)| o)
                .collect()
        };
        let params = params.with("learnt", &learnt);
        let found: Vec<Found> = find.fetch_all(&mut *c, &params).await?;
        let this_found = found
            .iter()
            .any(|f| f.event_id == signal.event_id && f.invoice_id.is_some());
        let mut to_apply = ToApply::default();
        for f in found {
            if let Some(invoice) = f.invoice_id {
                to_apply.push(f.event_id, invoice, f.object_id, &f.signal, f.event_at);
            }
        }
        if to_apply.ids.is_empty() {
            return Ok(Recorded {
                outcome: outcome(signal.signal, false, false),
                linked: 0,
            });
        }
        let params = params
            .with("ids", &to_apply.ids)
            .with("invoices", &to_apply.invoices)
            .with("objects", &to_apply.objects)
            .with("states", &to_apply.states)
            .with("ranks", &to_apply.ranks)
            .with("ats", &to_apply.ats)
            .with("pending_secs", &pending_secs);
        let (linked, held): (i64, bool) = apply.fetch_one(&mut *c, &params).await?;
        Ok::<_, sqlx::Error>(Recorded {
            outcome: outcome(signal.signal, this_found, held),
            linked: u64::try_from(linked).unwrap_or(0),
        })
    }
    .await)
}

/// `payment_events.signal` of an event that only teaches links.
const LINK_ONLY: &str = "link";

fn outcome(signal: Option<Signal>, found: bool, held: bool) -> SignalOutcome {
    match (signal, found, held) {
        (None, _, _) => SignalOutcome::Learnt,
        (Some(_), false, _) => SignalOutcome::Unlinked,
        (Some(_), true, true) => SignalOutcome::Stored,
        (Some(_), true, false) => SignalOutcome::Older,
    }
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

impl ToApply {
    fn push(
        &mut self,
        id: String,
        invoice: String,
        object: Option<String>,
        label: &str,
        at: DateTime<Utc>,
    ) {
        let signal = Signal::from_label(label);
        self.ids.push(id);
        self.invoices.push(invoice);
        self.objects.push(object.unwrap_or_default());
        self.states.push(signal.map(Signal::state));
        self.ranks.push(signal.map_or(0, Signal::rank));
        self.ats.push(at);
    }
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
