//! Building a reminder message from a rendered reminder and plain domain
//! values: `multipart/alternative` (text, then HTML) when there is an HTML
//! part, plain text otherwise.
//!
//! Every reminder has a deterministic `Message-ID:
//! <invoice-{id}.{period}@{smtp.message_id_domain}>` ([`message_id`]; a
//! statement's is [`statement_message_id`]), so the same reminder always
//! carries the same id and mail systems can deduplicate; the tick stores it
//! on the rows before the send. Besides, it carries
//! `X-Invoice-Id` and `X-Reminder-Period` headers, and `Auto-Submitted:
//! auto-generated` (RFC 3834: auto-responders do not answer it). A reminder
//! that follows earlier ones threads under them: `In-Reply-To` the latest,
//! `References` the earlier ones oldest first (at most [`MAX_REFERENCES`]).
//! With `[smtp.dkim]` every message is signed last, over the finished
//! headers (`crate::dkim`). Customer data (names,
//! invoice numbers) is stripped of control characters and length-limited
//! before it reaches a header, and lettre encodes what remains, so CR/LF in
//! a name can never start a new header. The recipients were parsed where
//! the source row entered ([`Recipients`](crate::domain::Recipients)): a
//! message goes to exactly those addresses.

use lettre::address::Envelope;
use lettre::message::header::{ContentType, Header, HeaderName, HeaderValue};
use lettre::message::{Body, Mailbox, Message, MessageBuilder, MultiPart, SinglePart};

use super::text::{MAX_NAME_CHARS, Rendered};
use crate::config::SmtpSettings;
use crate::domain::StepKey;
use crate::domain::sanitize;
use crate::domain::{Customer, Invoice, InvoiceId};

/// A reminder that cannot become a message; final, never retried.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("cannot build the message for invoice {invoice_id}: {reason}")]
    Build {
        invoice_id: InvoiceId,
        reason: String,
    },
    #[error("cannot render the reminder for invoice {invoice_id}: {reason}")]
    Render {
        invoice_id: InvoiceId,
        reason: String,
    },
}

/// A message ready to send.
#[derive(Debug, Clone)]
pub struct OutgoingMail {
    pub invoice_id: InvoiceId,
    /// The Message-ID value, without angle brackets.
    pub message_id: String,
    pub(super) envelope: Envelope,
    pub(super) bytes: Vec<u8>,
}

impl OutgoingMail {
    /// The formatted message as sent (headers and body).
    pub fn formatted(&self) -> &[u8] {
        &self.bytes
    }

    /// Sender and recipients for the SMTP transaction.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }
}

/// `invoice-{id}.{period}@{domain}`, the id as [`id_token`] writes it:
/// the same reminder, the same Message-ID.
pub fn message_id(invoice_id: &InvoiceId, step: &StepKey, domain: &str) -> String {
    format!("invoice-{}.{step}@{domain}", id_token(invoice_id))
}

/// An invoice id as it appears in the Message-ID and the `X-Invoice-Id`
/// header: as is when it is made only of ASCII letters, digits and `-`
/// (`42`, a UUID, `INV-2026-0042`); otherwise `_` followed by the lowercase
/// hex of its UTF-8 bytes (`INV/7` becomes `_494e562f37`). `_` never starts
/// an id used as is, so the two forms cannot collide, and either form is
/// valid in a Message-ID and safe in a header whatever the id holds.
pub fn id_token(invoice_id: &InvoiceId) -> String {
    let id = invoice_id.as_str();
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return id.to_owned();
    }
    let mut token = String::with_capacity(1 + 2 * id.len());
    token.push('_');
    for b in id.bytes() {
        token.push_str(&format!("{b:02x}"));
    }
    token
}

#[derive(Clone)]
struct XInvoiceId(String);

impl Header for XInvoiceId {
    fn name() -> HeaderName {
        HeaderName::new_from_ascii_str("X-Invoice-Id")
    }
    fn parse(s: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Self(s.to_owned()))
    }
    fn display(&self) -> HeaderValue {
        HeaderValue::new(Self::name(), self.0.clone())
    }
}

#[derive(Clone)]
struct AutoSubmitted;

impl Header for AutoSubmitted {
    fn name() -> HeaderName {
        HeaderName::new_from_ascii_str("Auto-Submitted")
    }
    fn parse(_: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Self)
    }
    fn display(&self) -> HeaderValue {
        HeaderValue::new(Self::name(), "auto-generated".to_owned())
    }
}

/// The most Message-IDs a `References` header lists: the first one (the
/// thread's root) and the latest ones.
pub const MAX_REFERENCES: usize = 10;

/// `earlier` cut to [`MAX_REFERENCES`]: the root and the latest, in order.
fn bounded_references(earlier: &[String]) -> Vec<&str> {
    if earlier.len() <= MAX_REFERENCES {
        return earlier.iter().map(String::as_str).collect();
    }
    let latest = earlier
        .len()
        .saturating_sub(MAX_REFERENCES.saturating_sub(1));
    earlier
        .first()
        .into_iter()
        .chain(earlier.get(latest..).unwrap_or_default())
        .map(String::as_str)
        .collect()
}

#[derive(Clone)]
struct XReminderPeriod(String);

impl Header for XReminderPeriod {
    fn name() -> HeaderName {
        HeaderName::new_from_ascii_str("X-Reminder-Period")
    }
    fn parse(s: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Self(s.to_owned()))
    }
    fn display(&self) -> HeaderValue {
        HeaderValue::new(Self::name(), self.0.clone())
    }
}

/// `part` as the message's raw body under a `Content-Type` header of the
/// message's own. lettre writes a multipart body's `Content-Type` as part of
/// the body, after the headers it signs: the DKIM signature would then say
/// the message has no `Content-Type` and every verifier would fail it.
/// Lifted into the headers, it is signed like the others. (Only with DKIM:
/// the bytes of unsigned messages stay as they were.)
fn lifted(builder: MessageBuilder, part: &MultiPart) -> Result<Message, String> {
    let formatted = part.formatted();
    let split = formatted
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the multipart body has no header block")?;
    let (head, body) = formatted.split_at(split);
    let body = body.get(4..).unwrap_or_default().to_vec();
    let head = String::from_utf8_lossy(head).replace("\r\n", "");
    let value = head
        .strip_prefix("Content-Type:")
        .ok_or("the multipart body does not start with its Content-Type")?
        .trim();
    let content_type = ContentType::parse(value).map_err(|e| e.to_string())?;
    builder
        .header(content_type)
        .body(Body::new(body))
        .map_err(|e| e.to_string())
}

/// Builds the message for a rendered reminder about `invoice` to
/// `customer`, keyed by `period` (the step), under `message_id`.
/// `earlier`: the Message-IDs (without angle brackets) of the reminders
/// sent before it in its thread, oldest first.
#[allow(clippy::too_many_arguments)]
pub fn build_message(
    smtp: &SmtpSettings,
    reply_to: Option<&Mailbox>,
    invoice: &Invoice,
    customer: &Customer,
    step: &StepKey,
    message_id: String,
    earlier: &[String],
    rendered: Rendered,
) -> Result<OutgoingMail, MessageError> {
    let keys = MailKeys {
        invoice_id: &invoice.id,
        message_id,
        invoice_header: id_token(&invoice.id),
        step_header: step.to_string(),
        earlier,
    };
    build(smtp, reply_to, customer, keys, rendered)
}

/// `statement-{customer}.{reminder}.{run}@{domain}`: one per statement,
/// from its customer (as [`id_token`] writes ids), its first reminder row
/// and the run that first sent it. A statement resent as it was keeps the
/// Message-ID it was stored under; one that lists other invoices is a new
/// mail, and the run makes its Message-ID new even when its first row is
/// the same.
pub fn statement_message_id(
    customer_id: &str,
    first_reminder: i64,
    run_id: i64,
    domain: &str,
) -> String {
    format!(
        "statement-{}.{first_reminder}.{run_id}@{domain}",
        id_token(&InvoiceId(customer_id.to_owned()))
    )
}

/// Builds a statement: `invoices` (with their steps, in order) to
/// `customer`, under `message_id`, threaded under `earlier` (the
/// customer's earlier statements, oldest first). `X-Invoice-Id` and
/// `X-Reminder-Period` list every invoice and step, comma-separated, in the
/// same order.
pub fn build_statement(
    smtp: &SmtpSettings,
    reply_to: Option<&Mailbox>,
    invoices: &[(&Invoice, &str)],
    customer: &Customer,
    message_id: String,
    earlier: &[String],
    rendered: Rendered,
) -> Result<OutgoingMail, MessageError> {
    let Some((first, _)) = invoices.first() else {
        return Err(MessageError::Build {
            invoice_id: InvoiceId::default(),
            reason: "a statement without invoices".into(),
        });
    };
    let tokens: Vec<String> = invoices.iter().map(|(i, _)| id_token(&i.id)).collect();
    let steps: Vec<&str> = invoices.iter().map(|(_, p)| *p).collect();
    let keys = MailKeys {
        invoice_id: &first.id,
        message_id,
        invoice_header: tokens.join(", "),
        step_header: steps.join(", "),
        earlier,
    };
    build(smtp, reply_to, customer, keys, rendered)
}

/// What identifies one message: its Message-ID and our own headers.
struct MailKeys<'a> {
    /// Named in errors (a statement's first invoice).
    invoice_id: &'a InvoiceId,
    message_id: String,
    invoice_header: String,
    step_header: String,
    /// The thread's earlier Message-IDs, oldest first.
    earlier: &'a [String],
}

fn build(
    smtp: &SmtpSettings,
    reply_to: Option<&Mailbox>,
    customer: &Customer,
    keys: MailKeys<'_>,
    rendered: Rendered,
) -> Result<OutgoingMail, MessageError> {
    let invoice_id = keys.invoice_id;
    let addresses = customer.email.addresses();
    let name = sanitize(&customer.name, MAX_NAME_CHARS);
    let id = keys.message_id;
    // The envelope from the addresses in hand: lettre would otherwise
    // parse it back out of the From and To headers it was just given.
    let envelope =
        Envelope::new(Some(smtp.from.email.clone()), addresses.to_vec()).map_err(|e| {
            MessageError::Build {
                invoice_id: invoice_id.clone(),
                reason: e.to_string(),
            }
        })?;
    let mut builder = Message::builder()
        .from(smtp.from.clone())
        .envelope(envelope);
    for address in addresses {
        builder = builder.to(Mailbox::new(
            (!name.is_empty()).then(|| name.clone()),
            address.clone(),
        ));
    }
    let mut builder = builder
        .subject(rendered.subject)
        .message_id(Some(format!("<{id}>")))
        .header(XInvoiceId(keys.invoice_header))
        .header(XReminderPeriod(keys.step_header))
        .header(AutoSubmitted);
    if let Some(latest) = keys.earlier.last() {
        let references = bounded_references(keys.earlier)
            .iter()
            .map(|id| format!("<{id}>"))
            .collect::<Vec<_>>()
            .join(" ");
        builder = builder
            .in_reply_to(format!("<{latest}>"))
            .references(references);
    }
    if let Some(reply_to) = reply_to {
        builder = builder.reply_to(reply_to.clone());
    }
    let signed = smtp.dkim.loaded().is_some();
    let multipart = |builder: MessageBuilder, part: MultiPart| {
        if signed {
            lifted(builder, &part)
        } else {
            builder.multipart(part).map_err(|e| e.to_string())
        }
    };
    let built = match (rendered.html, rendered.attachments) {
        // Text first, HTML second: clients show the last part they can.
        (Some(html), files) if files.is_empty() => multipart(
            builder,
            MultiPart::alternative_plain_html(rendered.text, html),
        ),
        (None, files) if files.is_empty() => builder
            .header(ContentType::TEXT_PLAIN)
            .body(rendered.text)
            .map_err(|e| e.to_string()),
        // The text (and HTML) first, then each file: multipart/mixed.
        (html, files) => {
            let mut mixed = match html {
                Some(html) => MultiPart::mixed()
                    .multipart(MultiPart::alternative_plain_html(rendered.text, html)),
                None => MultiPart::mixed().singlepart(SinglePart::plain(rendered.text)),
            };
            let pdf = ContentType::parse("application/pdf").map_err(|e| MessageError::Build {
                invoice_id: invoice_id.clone(),
                reason: e.to_string(),
            })?;
            for file in files {
                let name = file.filename.clone();
                mixed = mixed.singlepart(
                    lettre::message::Attachment::new(name).body(file.into_body(), pdf.clone()),
                );
            }
            multipart(builder, mixed)
        }
    };
    let mut message = built.map_err(|reason| MessageError::Build {
        invoice_id: invoice_id.clone(),
        reason,
    })?;
    if let Some(dkim) = smtp.dkim.loaded() {
        dkim.signer().sign(&mut message);
    }
    Ok(OutgoingMail {
        invoice_id: invoice_id.clone(),
        message_id: id,
        envelope: message.envelope().clone(),
        bytes: message.formatted(),
    })
}

#[cfg(test)]
mod tests;
