//! A payment signal: what a payment provider or a bank said about an
//! invoice, which holds its reminders (or releases a hold) until the
//! billing database catches up. The HTTP layer reads one from a signed
//! request (`http::payments`), the database keeps it (`db::payments`).

use chrono::{DateTime, Utc};

use super::InvoiceId;

/// What a signal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Paid: held until the source says paid or an operator lifts it.
    Paid,
    /// A payment on its way (a debit not yet settled): held until
    /// `payments.pending_hold` after the event.
    Pending,
    /// Disputed: held until an operator lifts it or the dispute is won.
    Disputed,
    /// A failed payment: a paid or pending hold ends (a dispute stays).
    Failed,
    /// Released: any hold ends (a dispute won, the generic `released`).
    Released,
}

impl Signal {
    /// The `kind` label of `invoice_reminder_payment_signals_total`, and
    /// the generic signal's word.
    pub fn label(self) -> &'static str {
        match self {
            Self::Paid => "paid",
            Self::Pending => "pending",
            Self::Disputed => "disputed",
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

    /// The state a hold takes from it (`payment_holds.state`).
    pub fn state(self) -> &'static str {
        match self {
            Self::Paid => "paid",
            Self::Pending => "pending",
            Self::Disputed => "disputed",
            Self::Failed | Self::Released => "released",
        }
    }

    /// Whether it ends a dispute's hold.
    pub fn ends_dispute(self) -> bool {
        self == Self::Released
    }
}

/// One signal, as verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentSignal {
    /// `stripe`, or `payments` for the generic signal.
    pub provider: &'static str,
    /// The provider's event id (Stripe's `evt_...`, the `webhook-id`).
    pub event_id: String,
    pub signal: Signal,
    /// The invoice it names; None: find it by `linked`.
    pub invoice_id: Option<InvoiceId>,
    /// The provider's object (a Stripe payment intent, invoice or dispute).
    pub object_id: Option<String>,
    /// An earlier object it belongs to (a dispute's payment intent), whose
    /// invoice it takes when it names none itself.
    pub linked: Option<String>,
    /// When the provider says it happened.
    pub at: DateTime<Utc>,
}

/// What storing a signal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOutcome {
    /// The invoice's hold now says what the signal says.
    Stored,
    /// The same event was stored before: nothing changed.
    Seen,
    /// The invoice's hold rests on a newer event (or the signal cannot end
    /// it): kept, nothing changed.
    Older,
    /// No invoice: the object named none, and no earlier event did.
    NoInvoice,
}

impl SignalOutcome {
    /// The `outcome` label of `invoice_reminder_payment_signals_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Stored => "stored",
            Self::Seen => "seen",
            Self::Older => "older",
            Self::NoInvoice => "no_invoice",
        }
    }
}
