//! What payment events teach about their objects (`payment_links`), and
//! the signals that finding an invoice lets apply.
//!
//! A link says an object names our invoice (`invoice_id`) or another
//! object that may (`via`); the first answer learnt stays. Learning is
//! done in the transaction that stores an event ([`Learning::apply_on`],
//! from `payments::record`), or on its own when a lookup at the provider
//! found one ([`learn`]). Either way, every signal still unlinked whose
//! objects now lead to an invoice is applied in the same transaction, in
//! the order of its provider's time (equal times by meaning), so the
//! order events arrive in never changes the holds they end in.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::params::Params;
use crate::domain::{LinkTo, PaymentLink, Signal};

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

const LEARN: &str =
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
     RETURNING p.object_id";

/// The event `$event_id` itself, and the unlinked events whose objects the
/// links just learnt (`$learnt`) may now lead to an invoice, each with the
/// invoice it finds.
const FIND: &str = concat!(
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
);

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

/// One event found with its invoice.
#[derive(Debug, FromRow)]
struct Found {
    event_id: String,
    signal: String,
    object_id: Option<String>,
    event_at: DateTime<Utc>,
    invoice_id: Option<String>,
}

/// What learning did.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Applied {
    /// The event being stored found its invoice.
    pub found: bool,
    /// Its object's hold now says what it says.
    pub held: bool,
    /// Earlier signals that found their invoice through these links.
    pub linked: u64,
}

/// Links to learn from one source (an event, or a lookup), laid out as
/// the statements read them.
pub(super) struct Learning<'a> {
    db: &'a Db,
    provider: &'static str,
    /// The event being stored ("": none, a lookup's links).
    event_id: &'a str,
    objects: Vec<String>,
    invoices: Vec<Option<String>>,
    vias: Vec<Option<String>>,
    pending_secs: f64,
}

impl<'a> Learning<'a> {
    pub fn new(
        db: &'a Db,
        provider: &'static str,
        event_id: &'a str,
        links: &[PaymentLink],
        pending_hold: Duration,
    ) -> Self {
        let mut learning = Self {
            db,
            provider,
            event_id,
            objects: Vec::new(),
            invoices: Vec::new(),
            vias: Vec::new(),
            pending_secs: pending_hold.as_secs_f64(),
        };
        for link in links {
            let (invoice, via) = match &link.to {
                LinkTo::Invoice(id) => (Some(id.as_str().to_owned()), None),
                LinkTo::Object(o) if *o == link.object => continue,
                LinkTo::Object(o) => (None, Some(o.clone())),
            };
            learning.objects.push(link.object.clone());
            learning.invoices.push(invoice);
            learning.vias.push(via);
        }
        learning
    }

    /// Learns the links on `c` (a transaction), then applies the event
    /// being stored and every unlinked signal they let find its invoice.
    pub async fn apply_on(&self, c: &mut sqlx::PgConnection) -> Result<Applied, sqlx::Error> {
        let source = self.event_id.to_owned();
        let params = Params::default()
            .with("provider", &self.provider)
            .with("event_id", &source)
            .with("link_objects", &self.objects)
            .with("link_invoices", &self.invoices)
            .with("link_vias", &self.vias);
        let learnt: Vec<String> = if self.objects.is_empty() {
            Vec::new()
        } else {
            self.db
                .statement(LEARN)
                .fetch_all::<(String,)>(&mut *c, &params)
                .await?
                .into_iter()
                .map(|(o,)| o)
                .collect()
        };
        let params = params.with("learnt", &learnt);
        let found: Vec<Found> = self.db.statement(FIND).fetch_all(&mut *c, &params).await?;
        let mut applied = Applied {
            found: found
                .iter()
                .any(|f| f.event_id == self.event_id && f.invoice_id.is_some()),
            ..Applied::default()
        };
        let mut to_apply = ToApply::default();
        for f in found {
            if let Some(invoice) = f.invoice_id {
                to_apply.push(f.event_id, invoice, f.object_id, &f.signal, f.event_at);
            }
        }
        if to_apply.ids.is_empty() {
            return Ok(applied);
        }
        let params = params
            .with("ids", &to_apply.ids)
            .with("invoices", &to_apply.invoices)
            .with("objects", &to_apply.objects)
            .with("states", &to_apply.states)
            .with("ranks", &to_apply.ranks)
            .with("ats", &to_apply.ats)
            .with("pending_secs", &self.pending_secs);
        let (linked, held): (i64, bool) =
            self.db.statement(APPLY).fetch_one(&mut *c, &params).await?;
        applied.held = held;
        applied.linked = u64::try_from(linked).unwrap_or(0);
        Ok(applied)
    }
}

/// Learns `links` (a lookup's answer at `provider`) and applies every
/// unlinked signal they let find its invoice; how many did.
pub async fn learn(
    db: &Db,
    provider: &'static str,
    links: &[PaymentLink],
    pending_hold: Duration,
) -> Result<u64, sqlx::Error> {
    let learning = Learning::new(db, provider, "", links, pending_hold);
    on_db!(db, tx, |c| async {
        Ok::<_, sqlx::Error>(learning.apply_on(c).await?.linked)
    }
    .await)
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
