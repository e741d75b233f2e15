//! Plain values that cross layers: the ids of our tables, the invoice and
//! customer a message is built from, what one delivery ended in, and what a
//! tick did. `db` maps its rows into these; `mail` builds messages from
//! them; neither imports the other.

use std::fmt;

use chrono::NaiveDate;

mod step_key;
pub use step_key::StepKey;

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
    pub email: String,
    /// BCP 47 tag (`de-CH`); None: `templates.default_locale`.
    pub locale: Option<String>,
    /// The source's `customer_id` (customer mode only).
    pub id: Option<String>,
}

/// What a reminder is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoice {
    pub id: InvoiceId,
    pub number: String,
    pub amount: Amount,
    /// ISO 4217 code, as the source has it.
    pub currency: String,
    pub due_date: NaiveDate,
    /// The source's `payment_url`; wins over `company.payment_url`.
    pub payment_url: Option<String>,
}

/// An invoice's amount as the source gives it (exactly one of its two
/// amount columns). Turned into minor units when a message is rendered,
/// with the currency data the `money` filter uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Amount {
    /// `amount_minor`: in minor units of the currency (cents).
    Minor(i64),
    /// `amount`: in major units, as exact decimal text (`"1234.50"`).
    Major(String),
    /// The source's amount is NULL: such a reminder is never sent (it is
    /// discarded with the reason).
    Missing,
}

impl Amount {
    /// From the two columns statements select (`amount_minor`,
    /// `amount_major`).
    pub fn from_columns(minor: Option<i64>, major: Option<String>) -> Self {
        match (minor, major) {
            (_, Some(major)) => Self::Major(major),
            (Some(minor), None) => Self::Minor(minor),
            (None, None) => Self::Missing,
        }
    }
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

/// What the SMTP server said when it took a message, and what exactly it
/// took: stored on the sent row (and, with `archive.store = "database"`,
/// the message itself in the archive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    /// The server's final reply to the message: `250 2.0.0 Ok: queued as 4F3X2`.
    pub reply: String,
    /// SHA-256 of the exact bytes handed to DATA (headers and body, before
    /// SMTP's dot-stuffing and final `.`).
    pub sha256: [u8; 32],
    /// Those bytes, when they are to be archived.
    pub archived: Option<MessageBytes>,
}

/// A sent message's bytes, shared without copying; `Debug` shows only the
/// length.
#[derive(Clone, PartialEq, Eq)]
pub struct MessageBytes(pub std::sync::Arc<[u8]>);

impl fmt::Debug for MessageBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageBytes({} bytes)", self.0.len())
    }
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

/// What one send attempt ended in, as recorded on the row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The SMTP server accepted the message.
    Sent { message_id: String, proof: Proof },
    /// Transient failure: retried on a later tick while attempts remain.
    Failed { error: String },
    /// Not delivered because the SMTP server could not be reached at all:
    /// `failed` like a transient failure, but it does not use up an attempt
    /// (nothing reached the server), so an outage cannot exhaust retries.
    Deferred { error: String },
    /// Final failure: never retried.
    Discarded { error: String },
    /// Handed over without a reply: stays `sending`, never retried.
    Unknown { error: String },
    /// Never sent, and never will be for this step: recorded `skipped`
    /// (the row keeps its claim) with the reason.
    Skipped { reason: SkipReason },
}

/// Why a claimed reminder was not sent at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Every recipient is on the suppression list.
    Suppressed,
}

impl SkipReason {
    /// As stored in `reminders.last_error` of a `skipped` row.
    pub fn label(self) -> &'static str {
        match self {
            Self::Suppressed => "suppressed",
        }
    }
}

impl Delivery {
    /// The word stored for it in a recording statement.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Sent { .. } => "sent",
            Self::Failed { .. } => "failed",
            Self::Deferred { .. } => "deferred",
            Self::Discarded { .. } => "discarded",
            Self::Unknown { .. } => "unknown",
            Self::Skipped { .. } => "skipped",
        }
    }
}

/// One finished attempt: which row, what it ended in, and what the row
/// looked like when this run claimed it (so recording it twice, after a
/// write whose reply was lost, counts the attempt once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempted {
    pub id: ReminderId,
    pub invoice: InvoiceId,
    /// The step (`reminders.period`).
    pub step: StepKey,
    /// `attempts` as claimed, before this attempt.
    pub attempts_before: i32,
    /// The Message-ID the attempt's mail carried (stored on the row).
    pub message_id: String,
    pub delivery: Delivery,
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
    }

    /// Counts one delivery by what it ended in, as recording it would.
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
}

/// A count of items as a `u32` count field, saturating (a page never holds
/// 4 billion rows, but a count must not wrap if it did).
pub fn count_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Why a source row cannot make a reminder. Such a row is skipped (never
/// claimed, never mailed) and reported under its [`Problem::label`]; the
/// other rows go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// The key is on more than one row: the rows may disagree (address,
    /// amount, currency), and which one to believe is not ours to guess.
    RepeatedKey,
    /// `invoice_id` is NULL: the row cannot be claimed.
    NullKey,
    /// `email`, `due_date`, `currency` or the amount is NULL.
    MissingField,
    /// `currency` is not an ISO 4217 code.
    BadCurrency,
    /// An address in `email` does not parse (or there is none).
    BadAddress,
    /// The amount does not fit the currency's minor units (out of range).
    BadAmount,
    /// `due_date` is `infinity`, `-infinity` or past the dates the worker
    /// can hold: no step can be dated from it.
    BadDueDate,
}

impl Problem {
    pub const ALL: [Problem; 7] = [
        Self::RepeatedKey,
        Self::NullKey,
        Self::MissingField,
        Self::BadCurrency,
        Self::BadAddress,
        Self::BadAmount,
        Self::BadDueDate,
    ];

    /// The `problem` label of `invoice_reminder_source_problems_total`, as
    /// `audit` and `check-source` print it.
    pub fn label(self) -> &'static str {
        match self {
            Self::RepeatedKey => "repeated_key",
            Self::NullKey => "null_key",
            Self::MissingField => "missing_field",
            Self::BadCurrency => "bad_currency",
            Self::BadAddress => "bad_address",
            Self::BadAmount => "bad_amount",
            Self::BadDueDate => "bad_due_date",
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One source row that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SourceProblem {
    /// None for a NULL key.
    pub invoice_id: Option<InvoiceId>,
    /// The row's `invoice_number`, which names a row whose key is NULL.
    pub invoice_number: Option<String>,
    pub problem: Problem,
    /// What exactly is wrong ("email is NULL", "unknown currency \"XYZ\"").
    pub detail: String,
}

impl fmt::Display for SourceProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.invoice_id, &self.invoice_number) {
            (Some(id), _) => write!(f, "invoice {id}")?,
            (None, Some(number)) => write!(f, "invoice with a NULL key (number {number:?})")?,
            (None, None) => write!(f, "invoice with a NULL key and number")?,
        }
        write!(f, ": {} ({})", self.problem, self.detail)
    }
}
