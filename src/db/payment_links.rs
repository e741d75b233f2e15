//! What payment events teach about their objects (`payment_links`), and
//! which signals finding an invoice lets apply.
//!
//! A link says an object names our invoice (`invoice_id`) or another
//! object that may (`via`); the first answer learnt stays. Learning is
//! done in the transaction that stores an event, or on its own when a
//! lookup at the provider found one (both in `payments`, which applies
//! what [`Learning::find_on`] finds to the holds in the same transaction):
//! every signal still unlinked whose objects now lead to an invoice is
//! found, whatever order the events arrived in.

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
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

/// One event as found, with its invoice if any.
#[derive(Debug, FromRow)]
struct FoundRow {
    event_id: String,
    signal: String,
    object_id: Option<String>,
    event_at: DateTime<Utc>,
    invoice_id: Option<String>,
}

/// An event that found its invoice.
#[derive(Debug, Clone)]
pub(super) struct Linked {
    pub event_id: String,
    pub invoice_id: String,
    /// Its payment object ('' for the generic signal).
    pub object_id: String,
    /// None: it only taught links.
    pub signal: Option<Signal>,
    pub at: DateTime<Utc>,
}

/// What learning found.
#[derive(Debug, Clone, Default)]
pub(super) struct Found {
    /// The event being stored found its invoice.
    pub this: bool,
    /// Every event to apply (the one being stored among them).
    pub events: Vec<Linked>,
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
}

impl<'a> Learning<'a> {
    pub fn new(
        db: &'a Db,
        provider: &'static str,
        event_id: &'a str,
        links: &[PaymentLink],
    ) -> Self {
        let mut learning = Self {
            db,
            provider,
            event_id,
            objects: Vec::new(),
            invoices: Vec::new(),
            vias: Vec::new(),
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

    /// Learns the links on `c` (a transaction), then finds the event
    /// being stored and every unlinked signal they let find its invoice,
    /// each with that invoice (`payments` applies them to the holds).
    pub async fn find_on(&self, c: &mut sqlx::PgConnection) -> Result<Found, sqlx::Error> {
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
        let rows: Vec<FoundRow> = self.db.statement(FIND).fetch_all(&mut *c, &params).await?;
        let mut found = Found {
            this: rows
                .iter()
                .any(|f| f.event_id == self.event_id && f.invoice_id.is_some()),
            events: Vec::new(),
        };
        for row in rows {
            if let Some(invoice_id) = row.invoice_id {
                found.events.push(Linked {
                    event_id: row.event_id,
                    invoice_id,
                    object_id: row.object_id.unwrap_or_default(),
                    signal: Signal::from_label(&row.signal),
                    at: row.event_at,
                });
            }
        }
        Ok(found)
    }
}
