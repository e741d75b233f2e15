//! Plain values that cross layers: the ids of our tables, the invoice and
//! customer a message is built from (their address, money and step-key
//! values parsed once, where a source row enters), what one delivery ended
//! in, and what a tick did. `db` maps its rows into these; `mail` builds messages from
//! them; neither imports the other.

use std::fmt;

use chrono::NaiveDate;

mod address;
mod delivery;
mod holidays;
mod money;
mod open_days;
mod payment;
mod problem;
mod regime;
mod relay_rate;
mod send_window;
mod step_key;
mod text;
pub use address::{MAX_RECIPIENTS, Recipients, lowercase_addresses};
pub use delivery::{Attempted, Delivery, MessageBytes, Proof, SkipReason};
pub use holidays::Holidays;
pub use money::{Currency, Money};
pub use open_days::{ClosedBecause, Days, OpenDays};
pub use payment::{LinkTo, PaymentLink, PaymentSignal, Recorded, Signal, SignalOutcome};
pub use problem::{Problem, SourceProblem};
pub use regime::Regime;
pub use relay_rate::LearnedRate;
pub use send_window::{Hours, SendWindow, WindowState};
pub use step_key::StepKey;
pub use text::sanitize;

/// The source's `invoice_id`: the billing system's own key, as text
/// (`"42"`, a UUID, `"INV-2026-0042"`). Never interchangeable with a
/// [`ReminderId`].
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, sqlx::Type, serde::Serialize,
)]
#[sqlx(transparent)]
#[serde(transparent)]
pub struct InvoiceId(pub String);

impl InvoiceId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The demo tables' bigint ids, as the default source view exposes them.
impl From<i64> for InvoiceId {
    fn from(id: i64) -> Self {
        Self(id.to_string())
    }
}

impl From<&str> for InvoiceId {
    fn from(id: &str) -> Self {
        Self(id.to_owned())
    }
}

/// `reminders.id`: one claim of one (invoice, period).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, sqlx::Type, serde::Serialize,
)]
#[sqlx(transparent)]
#[serde(transparent)]
pub struct ReminderId(pub i64);

impl fmt::Display for InvoiceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for ReminderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Who a reminder goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Customer {
    pub name: String,
    pub email: Recipients,
    /// BCP 47 tag (`de-CH`); None: `templates.default_locale`.
    pub locale: Option<String>,
    /// The source's `customer_id` (customer mode only).
    pub id: Option<String>,
    /// The source's `timezone` (None: the send window's).
    pub timezone: Option<chrono_tz::Tz>,
    /// The source's `holiday_calendar` (None: the send window's).
    pub holiday_calendar: Option<String>,
}

/// What a reminder is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoice {
    pub id: InvoiceId,
    pub number: String,
    /// The amount due, in its currency (one of the source's two amount
    /// columns, checked against the currency's minor units).
    pub amount: Money,
    pub due_date: NaiveDate,
    /// The source's `payment_url`; wins over `company.payment_url`.
    pub payment_url: Option<String>,
    /// The source's `late_payment_regime`; None: `late_payment.regime`.
    pub late_payment_regime: Option<Regime>,
}

/// A reminder this run has claimed and may now send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub id: ReminderId,
    /// Delivery attempts finished before this claim (0 for a first claim).
    pub attempts: i32,
    /// The step claimed (`reminders.period`): `overdue`, `final-2`, ...
    pub step: StepKey,
    pub invoice: Invoice,
    pub customer: Customer,
    /// Message-IDs of the reminders already sent for this invoice, oldest
    /// first (at most the latest few): the thread this one continues.
    pub thread: Vec<String>,
    /// The Message-ID its last attempt's mail carried, when that mail's
    /// fate was unknown (a resend carries it again).
    pub stored_message_id: Option<String>,
}

/// The claimed reminders one message covers: one in invoice mode; in
/// customer mode every reminder this tick claimed for one customer's
/// statement (at most `reminders.max_invoices_per_mail`), oldest due date
/// first. Its rows are marked started together, with its Message-ID, and
/// their result is written together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Letter {
    pub rows: Vec<Claimed>,
    /// The Message-ID its mail carries (without angle brackets), stored on
    /// its rows before the send.
    pub message_id: String,
    /// The Message-ID was made for this attempt: no earlier mail carried
    /// it (a resend of an unknown mail carries that mail's).
    pub fresh_message_id: bool,
    pub kind: LetterKind,
}

/// What a letter's mail is: one invoice's reminder, or a customer's
/// statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LetterKind {
    Reminder,
    Statement,
}

impl Letter {
    pub fn ids(&self) -> impl Iterator<Item = ReminderId> + '_ {
        self.rows.iter().map(|r| r.id)
    }
}

/// What a tick did, or one part of it: the summary line, `job_runs` and
/// the result of recording a chunk of deliveries all use this one type.
/// Additions saturate: a count never wraps, whatever a source returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Rows claimed (new claims and retries).
    pub claimed: u32,
    pub sent: u32,
    /// Transient failures, retried on a later tick.
    pub failed: u32,
    /// Final failures: permanent rejections, invalid data, last attempts.
    pub discarded: u32,
    /// Sends whose result is unknown (left `sending`).
    pub unknown: u32,
    /// Overdue invoices on our pages that someone else had already claimed
    /// or that were paid meanwhile.
    pub skipped: u32,
    /// Claimed rows returned unstarted (lost lease, shutdown, SMTP down).
    pub handed_back: u32,
    /// Source rows skipped because they cannot make a reminder (a repeated
    /// key, a NULL, a bad currency or address): see [`Problem`].
    pub source_problems: u32,
    /// Claimed reminders not sent because every recipient is suppressed
    /// (recorded `skipped`).
    pub suppressed: u32,
    /// Steps that could no longer be sent within their window (the gap
    /// held them back past it): recorded `skipped`, never sent.
    pub superseded: u32,
    /// Claimed reminders that a console pause or a payment hold, come
    /// after the claim, stopped before their mail went: handed back
    /// unattempted.
    pub withheld: u32,
}

impl Counts {
    /// Adds `other` field by field.
    pub fn add(&mut self, other: &Counts) {
        self.claimed = self.claimed.saturating_add(other.claimed);
        self.sent = self.sent.saturating_add(other.sent);
        self.failed = self.failed.saturating_add(other.failed);
        self.discarded = self.discarded.saturating_add(other.discarded);
        self.unknown = self.unknown.saturating_add(other.unknown);
        self.skipped = self.skipped.saturating_add(other.skipped);
        self.handed_back = self.handed_back.saturating_add(other.handed_back);
        self.source_problems = self.source_problems.saturating_add(other.source_problems);
        self.suppressed = self.suppressed.saturating_add(other.suppressed);
        self.superseded = self.superseded.saturating_add(other.superseded);
        self.withheld = self.withheld.saturating_add(other.withheld);
    }

    /// Counts one delivery by what it ended in, as recording it would
    /// (a transient failure on the row's last attempt aside: see
    /// [`Counts::count_written`]).
    pub fn count(&mut self, delivery: &Delivery) {
        let field = match delivery {
            Delivery::Sent { .. } => &mut self.sent,
            Delivery::Failed { .. } | Delivery::Deferred { .. } => &mut self.failed,
            Delivery::Discarded { .. } => &mut self.discarded,
            Delivery::Unknown { .. } => &mut self.unknown,
            Delivery::Skipped { .. } => &mut self.suppressed,
        };
        *field = field.saturating_add(1);
    }

    /// Counts one delivery as it was written: as [`Counts::count`], but a
    /// transient failure that used the row's last attempt was written
    /// `discarded` (`gave_up`), and counts as such.
    pub fn count_written(&mut self, delivery: &Delivery, gave_up: bool) {
        match delivery {
            Delivery::Failed { .. } if gave_up => {
                self.discarded = self.discarded.saturating_add(1);
            }
            delivery => self.count(delivery),
        }
    }
}

/// Where one tick's time went, in milliseconds: what its senders waited
/// on (`marks`, `results`, `claims`: a send slot free and no letter to
/// take while the marker wrote a mark, wrote results, or waited for the
/// claimer; `pacer`, `pool`, `relay`: a letter waiting for its rate slot,
/// a connection, the relay's replies, summed over letters in flight), how
/// long the pool's connections stood idle between messages (summed over
/// connections), and what the phases spent in their own statements and
/// waiting for room: the claimer in the claim bound, the marker (its next
/// mark written) in the in-flight limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Waits {
    pub marks: u64,
    pub results: u64,
    pub claims: u64,
    pub pacer: u64,
    pub pool: u64,
    pub relay: u64,
    /// Connections of the pool idle between two messages.
    pub idle_connections: u64,
    /// The claimer's statements.
    pub claim_statements: u64,
    /// The claimer waiting for room (results not yet written).
    pub claim_room: u64,
    /// The marker's statements (marks, with the results they carry).
    pub mark_statements: u64,
    /// The marker's next mark, written, waiting for room in the in-flight
    /// limit: time in which the senders, not the marker, held the tick back.
    pub mark_room: u64,
    /// Results written without a mark.
    pub record_statements: u64,
}

/// A count of items as a `u32` count field, saturating (a page never holds
/// 4 billion rows, but a count must not wrap if it did).
pub fn count_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
