//! A payment signal: what a payment provider or a bank said about a
//! payment object (a Stripe PaymentIntent, Checkout Session, Invoice or
//! dispute; for the generic signal, the invoice itself), which holds the
//! invoice's reminders (or ends that object's hold) until the billing
//! database catches up. The HTTP layer reads one from a signed request
//! (`http::payments`), the database keeps it (`db::payments`).
//!
//! Each object's hold follows its newest signal; signals at the same time
//! are ordered by meaning ([`Signal::rank`]), never by arrival.

use chrono::{DateTime, Utc};

use super::InvoiceId;

/// What a signal says about its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Paid: held until the source says paid or an operator lifts it.
    Paid,
    /// A payment on its way (a debit not yet settled): held until
    /// `payments.pending_hold` after the event.
    Pending,
    /// Disputed: held until the dispute closes or an operator lifts it.
    Disputed,
    /// A dispute lost: held, shown as lost, until an operator lifts it.
    Lost,
    /// A payment arrived that may pay only part of its invoice (a Stripe
    /// InvoicePayment): its pending hold ends, and the invoice's own
    /// state decides.
    Settled,
    /// A failed payment: this object's hold ends.
    Failed,
    /// Released: this object's hold ends (the generic `released`, an
    /// inquiry closed without a dispute).
    Released,
}

impl Signal {
    /// The `kind` label of `invoice_reminder_payment_signals_total`, and
    /// the word `payment_events.signal` keeps.
    pub fn label(self) -> &'static str {
        match self {
            Self::Paid => "paid",
            Self::Pending => "pending",
            Self::Disputed => "disputed",
            Self::Lost => "lost",
            Self::Settled => "settled",
            Self::Failed => "failed",
            Self::Released => "released",
        }
    }

    /// The generic signal's word, read.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "paid" => Some(Self::Paid),
            "pending" => Some(Self::Pending),
            "disputed" => Some(Self::Disputed),
            "released" => Some(Self::Released),
            _ => None,
        }
    }

    /// A stored signal's word (`payment_events.signal`), read; None for
    /// an event that only taught links.
    pub fn from_label(word: &str) -> Option<Self> {
        match word {
            "lost" => Some(Self::Lost),
            "settled" => Some(Self::Settled),
            "failed" => Some(Self::Failed),
            other => Self::parse(other),
        }
    }

    /// The state an object's hold takes from it (`payment_holds.state`).
    pub fn state(self) -> &'static str {
        match self {
            Self::Paid => "paid",
            Self::Pending => "pending",
            Self::Disputed => "disputed",
            Self::Lost => "lost",
            Self::Settled => "settled",
            Self::Failed | Self::Released => "released",
        }
    }

    /// Its place when two signals for one object carry the same time:
    /// the higher wins (paid over a lost dispute over a dispute over a
    /// settled payment over a pending one over a release), so the order
    /// they arrive in never matters.
    pub fn rank(self) -> i16 {
        match self {
            Self::Paid => 6,
            Self::Lost => 5,
            Self::Disputed => 4,
            Self::Settled => 3,
            Self::Pending => 2,
            Self::Failed | Self::Released => 1,
        }
    }
}

/// What an object, named in an event, belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkTo {
    /// Our invoice.
    Invoice(InvoiceId),
    /// Another object of the same provider (a PaymentIntent's Stripe
    /// invoice, a Charge's PaymentIntent), which may name our invoice.
    Object(String),
}

/// A link an event teaches: `object` belongs to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentLink {
    pub object: String,
    pub to: LinkTo,
}

/// One signal, as verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentSignal {
    /// `stripe`, or `payments` for the generic signal.
    pub provider: &'static str,
    /// The provider's event id (Stripe's `evt_...`, the `webhook-id`).
    pub event_id: String,
    /// None: the event only teaches links (a Stripe invoice finalized).
    pub signal: Option<Signal>,
    /// The invoice it names itself; None: found through `refs`.
    pub invoice_id: Option<InvoiceId>,
    /// The object whose hold it changes ('' for the generic signal).
    pub object_id: String,
    /// The objects whose links may name its invoice, in the order tried.
    pub refs: Vec<String>,
    /// What it teaches about its objects.
    pub links: Vec<PaymentLink>,
    /// When the provider says it happened.
    pub at: DateTime<Utc>,
}

/// What storing a signal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOutcome {
    /// Its object's hold now says what the signal says.
    Stored,
    /// The same event was stored before: nothing changed.
    Seen,
    /// Its object's hold rests on a newer event (or one of the same time
    /// that means more): kept, nothing changed.
    Older,
    /// No invoice yet: kept with its objects, it applies when a later
    /// event links one of them.
    Unlinked,
    /// It teaches links only (and applied the signals they linked).
    Learnt,
}

impl SignalOutcome {
    /// The `outcome` label of `invoice_reminder_payment_signals_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Stored => "stored",
            Self::Seen => "seen",
            Self::Older => "older",
            Self::Unlinked => "unlinked",
            Self::Learnt => "learnt",
        }
    }
}

/// What storing a signal did, with the earlier unlinked signals it let
/// apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub outcome: SignalOutcome,
    /// Earlier signals that found their invoice through this event's links.
    pub linked: u64,
}
