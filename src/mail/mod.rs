//! Mail: what a reminder says ([`templates`], [`format`], the payment link
//! in `links`), the message it
//! becomes ([`message`]), and handing it to the SMTP server with an outcome
//! we can trust ([`smtp`]).
//!
//! `mail` works on plain domain values (`crate::domain`, `crate::stages`);
//! it never reads the database and never decides what is owed.

mod connect;
mod filters;
pub mod format;
mod late;
mod links;
mod load;
pub mod message;
pub mod pace;
mod pdf;
mod pool;
mod replies;
mod ride;
pub mod smtp;
pub mod statement;
pub mod templates;
pub mod text;
pub mod transaction;
mod vars;
pub mod written;

use chrono::NaiveDate;

use crate::config::SmtpSettings;
use crate::domain::{Customer, Delivery, Invoice, MessageBytes, Proof};
use crate::stages::{Stages, Step};

pub use late::letter_name;
pub use message::{
    MessageError, OutgoingMail, build_message, build_statement, message_id, statement_message_id,
};
pub use replies::{SendError, classify};
pub use smtp::Mailer;
pub use templates::{TemplateError, Templates};
pub use text::{Attachment, Rendered};
pub use transaction::{Accepted, RefusedRecipient};
pub use vars::sample;

/// The reminder for `step` about `invoice` to `customer`, rendered and
/// built under `message_id` ([`message_id`] makes it): what the tick sends
/// and what `preview` prints. `earlier`: the Message-IDs of the thread's
/// earlier reminders, oldest first.
#[allow(clippy::too_many_arguments)]
pub fn compose(
    templates: &Templates,
    stages: &Stages,
    smtp: &SmtpSettings,
    invoice: &Invoice,
    customer: &Customer,
    step: &Step,
    message_id: String,
    earlier: &[String],
    today: NaiveDate,
) -> Result<OutgoingMail, MessageError> {
    let stage = stages.stage(step);
    let rendered = templates
        .render(stage, step, invoice, customer, today)
        .map_err(|e| MessageError::Render {
            invoice_id: invoice.id.clone(),
            reason: e.to_string(),
        })?;
    build_message(
        smtp,
        templates.reply_to(),
        invoice,
        customer,
        &step.key,
        message_id,
        earlier,
        rendered,
    )
}

/// The statement listing `lines` to `customer` (customer mode), rendered
/// and built under `message_id`, threaded under `earlier`: what the tick
/// sends and what `preview --customer` prints.
#[allow(clippy::too_many_arguments)]
pub fn compose_statement(
    templates: &Templates,
    stages: &Stages,
    smtp: &SmtpSettings,
    lines: &[statement::Line<'_>],
    customer: &Customer,
    message_id: String,
    earlier: &[String],
    today: NaiveDate,
) -> Result<OutgoingMail, MessageError> {
    let first = lines
        .first()
        .map(|l| l.invoice.id.clone())
        .unwrap_or_default();
    let rendered = templates
        .render_statement(stages, lines, customer, today)
        .map_err(|e| MessageError::Render {
            invoice_id: first,
            reason: e.to_string(),
        })?;
    let invoices: Vec<(&Invoice, &str)> = lines
        .iter()
        .map(|l| (l.invoice, l.step.key.as_str()))
        .collect();
    build_statement(
        smtp,
        templates.reply_to(),
        &invoices,
        customer,
        message_id,
        earlier,
        rendered,
    )
}

/// The delivery of `mail`, which the server accepted, with its proof: the
/// server's final reply and the SHA-256 of the exact bytes handed to DATA;
/// with `archive`, the bytes too. A send that failed is a delivery too
/// ([`classify`]).
pub fn sent(mail: OutgoingMail, accepted: Accepted, archive: bool) -> Delivery {
    use sha2::Digest as _;
    let bytes = mail.formatted();
    let proof = Proof {
        refused: accepted
            .refused
            .iter()
            .map(|r| format!("{}: {}", r.address, r.reply))
            .collect(),
        reply: accepted.reply,
        sha256: sha2::Sha256::digest(bytes).into(),
        archived: archive.then(|| MessageBytes(bytes.into())),
    };
    Delivery::Sent {
        message_id: mail.message_id,
        proof,
    }
}
