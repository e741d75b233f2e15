//! Stripe's events read into payment signals and the links they teach,
//! in both shapes Stripe sends (docs/own-invoices.md, "Stripe"): which
//! shape is chosen by the event's top-level `api_version`, never by the
//! fields that happen to be present. Before 2025-03-31.basil a
//! PaymentIntent names its Stripe invoice (`invoice`) and an Invoice its
//! PaymentIntent (`payment_intent`); from basil on neither does, an
//! invoice may be paid in parts, and `invoice_payment.paid` pairs each
//! payment with its invoice. An event without `api_version` (Stripe
//! always sends one) is read in the older shape, whose fields a newer
//! event lacks anyway.
//!
//! | event | object whose hold changes | signal |
//! |---|---|---|
//! | `payment_intent.processing` | the PaymentIntent | pending |
//! | `payment_intent.succeeded` | the PaymentIntent | paid, or settled when it pays a Stripe invoice that may be paid in parts (basil on) |
//! | `payment_intent.payment_failed`, `.canceled` | the PaymentIntent | failed |
//! | `charge.dispute.created`, `.updated`, `.closed` | the dispute | by its `status`: disputed; `won` paid; `lost` lost; `warning_closed` released |
//! | `invoice.*` | the Stripe invoice | paid for `invoice.paid` and whenever its `status` is `paid`; otherwise links only |
//! | `invoice_payment.paid` | the PaymentIntent | settled (the invoice holds once Stripe says it is paid) |
//! | `checkout.session.completed` | the Checkout Session | `payment_status` `paid`: paid; `unpaid`: pending |
//! | `checkout.session.async_payment_succeeded` / `_failed` | the Checkout Session | paid / failed |
//!
//! Our invoice id is read from each object at `payments.stripe_invoice_key`.
//! Every event teaches what it names: a Stripe invoice's id -> our invoice,
//! a PaymentIntent -> its Stripe invoice or our invoice, a Charge -> its
//! PaymentIntent.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;

use crate::domain::{InvoiceId, LinkTo, PaymentLink, PaymentSignal, Signal};

/// The longest id kept (an event's, an object's, an invoice's).
const MAX_ID_BYTES: usize = 256;

/// The oldest API version read.
pub const OLDEST_VERSION: &str = "2020-08-27";
/// The version from which an Invoice and a PaymentIntent no longer name
/// each other.
pub const BASIL: &str = "2025-03-31";

/// What a verified event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event {
    /// A signal (or links) to store, and what to ask Stripe if it finds
    /// no invoice.
    Signal(PaymentSignal, Option<Ask>),
    /// An event it does not act on: answered 2xx and counted.
    Ignored(String),
}

/// What to look up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ask {
    /// The invoice a PaymentIntent pays.
    PaymentIntent(String),
    /// A Charge's PaymentIntent, then its invoice.
    Charge(String),
}

/// The two shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Before basil: Invoice and PaymentIntent name each other, one
    /// payment pays an invoice.
    Linked,
    /// Basil on: neither names the other; payments may be partial.
    Parted,
}

/// Reads a verified event; Err: the body is not a Stripe event we can
/// read (400).
pub(super) fn read(body: &[u8], invoice_key: &[&str]) -> Result<Event, String> {
    let event: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let id = text(&event, "id").ok_or("the event has no \"id\"")?;
    let kind = text(&event, "type").ok_or("the event has no \"type\"")?;
    let created = event
        .get("created")
        .and_then(Value::as_i64)
        .ok_or("the event has no \"created\" time")?;
    let at: DateTime<Utc> =
        DateTime::from_timestamp(created, 0).ok_or("the event's \"created\" is out of range")?;
    let object = event
        .get("data")
        .and_then(|d| d.get("object"))
        .filter(|o| o.is_object())
        .ok_or("the event has no \"data.object\"")?;
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err("the event's \"id\" is empty or longer than 256 bytes".to_owned());
    }
    let shape = shape(event.get("api_version"))?;
    let read = Read {
        object,
        ours: short(lookup(object, invoice_key)).map(|s| InvoiceId::from(s.as_str())),
        shape,
    };
    let Some(found) = read.event(&kind) else {
        return Ok(Event::Ignored(format!("{kind} is not acted on")));
    };
    let ask = found.ask.filter(|_| read.ours.is_none());
    let signal = PaymentSignal {
        provider: "stripe",
        event_id: id,
        signal: found.signal,
        invoice_id: read.ours.clone(),
        object_id: found.object,
        refs: found.refs,
        links: found.links,
        at,
    };
    Ok(Event::Signal(signal, ask))
}

/// The shape of an event of API version `version`.
fn shape(version: Option<&Value>) -> Result<Shape, String> {
    let Some(version) = version.filter(|v| !v.is_null()) else {
        return Ok(Shape::Linked);
    };
    let text = version.as_str().unwrap_or("");
    let date = text
        .get(..10)
        .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok());
    match date {
        Some(d) if d < date_of(OLDEST_VERSION) => Err(format!(
            "API version {text} is older than {OLDEST_VERSION}: set the webhook endpoint to a newer version"
        )),
        Some(d) if d < date_of(BASIL) => Ok(Shape::Linked),
        Some(_) => Ok(Shape::Parted),
        None => Err("the event's \"api_version\" is not a Stripe API version".to_owned()),
    }
}

fn date_of(version: &str) -> NaiveDate {
    NaiveDate::parse_from_str(version, "%Y-%m-%d").unwrap_or(NaiveDate::MIN)
}

/// One event's object, being read.
struct Read<'a> {
    object: &'a Value,
    /// Our invoice, as the object names it.
    ours: Option<InvoiceId>,
    shape: Shape,
}

/// What an event means for one object.
struct Found {
    object: String,
    signal: Option<Signal>,
    refs: Vec<String>,
    links: Vec<PaymentLink>,
    /// What Stripe's API can tell when nothing learnt names the invoice.
    ask: Option<Ask>,
}

impl Read<'_> {
    fn event(&self, kind: &str) -> Option<Found> {
        let (family, _) = kind.split_once('.')?;
        match family {
            "payment_intent" => self.payment_intent(kind),
            "charge" if kind.starts_with("charge.dispute.") => self.dispute(kind),
            "invoice" => self.invoice(kind),
            "invoice_payment" if kind == "invoice_payment.paid" => self.invoice_payment(),
            "checkout" => self.checkout(kind),
            _ => None,
        }
    }

    fn id(&self, key: &str) -> Option<String> {
        short(id_of(self.object.get(key)?))
    }

    /// Links `object` to our invoice, when the object names it.
    fn to_ours(&self, object: &str, links: &mut Vec<PaymentLink>) {
        if let Some(ours) = &self.ours {
            links.push(PaymentLink {
                object: object.to_owned(),
                to: LinkTo::Invoice(ours.clone()),
            });
        }
    }

    fn payment_intent(&self, kind: &str) -> Option<Found> {
        let pi = self.id("id")?;
        let mut links = Vec::new();
        self.to_ours(&pi, &mut links);
        let mut refs = vec![pi.clone()];
        // Before basil a PaymentIntent that Stripe Billing made names its
        // invoice, and pays all of it.
        let invoice = (self.shape == Shape::Linked)
            .then(|| self.id("invoice"))
            .flatten();
        if let Some(invoice) = &invoice {
            links.push(link(&pi, invoice));
            refs.push(invoice.clone());
        }
        let signal = match kind {
            "payment_intent.processing" => Signal::Pending,
            "payment_intent.succeeded" if self.ours.is_some() || invoice.is_some() => Signal::Paid,
            // It may pay part of a Stripe invoice: its pending hold ends,
            // and the invoice holds once Stripe says it is paid.
            "payment_intent.succeeded" => Signal::Settled,
            "payment_intent.payment_failed" | "payment_intent.canceled" => Signal::Failed,
            _ => return None,
        };
        Some(Found {
            ask: invoice.is_none().then(|| Ask::PaymentIntent(pi.clone())),
            object: pi,
            signal: Some(signal),
            refs,
            links,
        })
    }

    fn dispute(&self, kind: &str) -> Option<Found> {
        if !matches!(
            kind,
            "charge.dispute.created" | "charge.dispute.updated" | "charge.dispute.closed"
        ) {
            return None;
        }
        let dispute = self.id("id")?;
        let (pi, charge) = (self.id("payment_intent"), self.id("charge"));
        let mut links = Vec::new();
        if let (Some(pi), Some(charge)) = (&pi, &charge) {
            links.push(link(charge, pi));
        }
        let signal = match text(self.object, "status").as_deref() {
            // The payment stands.
            Some("won") => Signal::Paid,
            Some("lost") => Signal::Lost,
            // An inquiry closed without a dispute.
            Some("warning_closed") => Signal::Released,
            _ => Signal::Disputed,
        };
        let ask = match (&pi, &charge) {
            (Some(pi), _) => Some(Ask::PaymentIntent(pi.clone())),
            (None, Some(charge)) => Some(Ask::Charge(charge.clone())),
            (None, None) => None,
        };
        Some(Found {
            object: dispute,
            signal: Some(signal),
            refs: pi.into_iter().chain(charge).collect(),
            links,
            ask,
        })
    }

    fn invoice(&self, kind: &str) -> Option<Found> {
        let invoice = self.id("id")?;
        let mut links = Vec::new();
        self.to_ours(&invoice, &mut links);
        if self.shape == Shape::Linked {
            for key in ["payment_intent", "charge"] {
                if let Some(payment) = self.id(key) {
                    links.push(link(&payment, &invoice));
                }
            }
        }
        let paid = kind == "invoice.paid" || text(self.object, "status").as_deref() == Some("paid");
        Some(Found {
            ask: None,
            refs: vec![invoice.clone()],
            object: invoice,
            signal: paid.then_some(Signal::Paid),
            links,
        })
    }

    fn invoice_payment(&self) -> Option<Found> {
        let invoice = self.id("invoice")?;
        let payment = self.object.get("payment")?;
        let pi = payment
            .get("payment_intent")
            .and_then(id_of)
            .and_then(|s| short(Some(s)));
        let charge = payment
            .get("charge")
            .and_then(id_of)
            .and_then(|s| short(Some(s)));
        let mut links: Vec<PaymentLink> = pi
            .iter()
            .chain(charge.iter())
            .map(|p| link(p, &invoice))
            .collect();
        let object = pi.or(charge)?;
        self.to_ours(&invoice, &mut links);
        Some(Found {
            ask: None,
            refs: vec![object.clone(), invoice],
            object,
            signal: Some(Signal::Settled),
            links,
        })
    }

    fn checkout(&self, kind: &str) -> Option<Found> {
        let session = self.id("id")?;
        let mut links = Vec::new();
        self.to_ours(&session, &mut links);
        let mut refs = vec![session.clone()];
        if let Some(pi) = self.id("payment_intent") {
            match &self.ours {
                Some(ours) => links.push(PaymentLink {
                    object: pi,
                    to: LinkTo::Invoice(ours.clone()),
                }),
                None => links.push(link(&pi, &session)),
            }
        }
        if let Some(invoice) = self.id("invoice") {
            links.push(link(&session, &invoice));
            refs.push(invoice);
        }
        let signal = match kind {
            "checkout.session.completed" | "checkout.session.async_payment_succeeded" => {
                match text(self.object, "payment_status").as_deref() {
                    Some("paid") => Signal::Paid,
                    Some("unpaid") => Signal::Pending,
                    _ => return None,
                }
            }
            "checkout.session.async_payment_failed" => Signal::Failed,
            _ => return None,
        };
        Some(Found {
            ask: None,
            object: session,
            signal: Some(signal),
            refs,
            links,
        })
    }
}

/// `object` belongs to the object `to`.
fn link(object: &str, to: &str) -> PaymentLink {
    PaymentLink {
        object: object.to_owned(),
        to: LinkTo::Object(to.to_owned()),
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// An id as Stripe writes a reference: the id, or the expanded object.
pub(super) fn id_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(_) => text(v, "id"),
        _ => None,
    }
}

fn short(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty() && s.len() <= MAX_ID_BYTES)
}

/// The value at `path` in `object`, as text (a string, or a number).
pub(super) fn lookup(object: &Value, path: &[&str]) -> Option<String> {
    let value = path.iter().try_fold(object, |v, key| v.get(*key))?;
    match value {
        Value::String(s) => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
