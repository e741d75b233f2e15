//! Building a reminder message from plain domain values.
//!
//! Every reminder has a deterministic `Message-ID:
//! <invoice-{id}.{period}@{smtp.message_id_domain}>`, so the same reminder
//! always carries the same id and mail systems can deduplicate, plus
//! `X-Invoice-Id` and `X-Reminder-Period` headers. Customer data (names,
//! invoice numbers) is stripped of control characters and length-limited
//! before it reaches a header, and lettre encodes what remains, so CR/LF in
//! a name can never start a new header. An address that does not parse is a
//! [`MessageError`]: the reminder is discarded with that reason and the
//! others still go out.

use chrono::NaiveDate;
use lettre::Address;
use lettre::address::Envelope;
use lettre::message::header::{ContentType, Header, HeaderName, HeaderValue};
use lettre::message::{Mailbox, Message};

use crate::config::SmtpSettings;
use crate::domain::{Customer, Invoice, InvoiceId};

/// Longest customer name we put in a header or greeting.
pub const MAX_NAME_CHARS: usize = 100;
/// Longest invoice number we put in a subject.
pub const MAX_NUMBER_CHARS: usize = 64;

/// A reminder that cannot become a message; final, never retried.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("invalid email address for invoice {invoice_id}: {reason}")]
    InvalidAddress {
        invoice_id: InvoiceId,
        reason: String,
    },
    #[error("cannot build the message for invoice {invoice_id}: {reason}")]
    Build {
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

/// `invoice-{id}.{period}@{domain}`: the same reminder, the same id.
pub fn message_id(invoice_id: InvoiceId, period: &str, domain: &str) -> String {
    format!("invoice-{invoice_id}.{period}@{domain}")
}

/// Removes control characters (CR, LF, TAB, ...), collapses whitespace and
/// truncates, so user data is safe and short in a header or a line.
pub fn sanitize(text: &str, max_chars: usize) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let collapsed = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() > max_chars {
        let mut cut: String = collapsed
            .chars()
            .take(max_chars.saturating_sub(1))
            .collect();
        cut.push('…');
        cut
    } else {
        collapsed
    }
}

/// `12345` cents, `EUR` → `123.45 EUR`.
pub fn format_amount(amount_cents: i64, currency: &str) -> String {
    let sign = if amount_cents < 0 { "-" } else { "" };
    let abs = amount_cents.unsigned_abs();
    format!("{sign}{}.{:02} {currency}", abs / 100, abs % 100)
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

/// Builds the reminder about `invoice` for `customer`. `today` is the
/// database's date in the configured zone (the same one the period came
/// from).
pub fn build_message(
    smtp: &SmtpSettings,
    invoice: &Invoice,
    customer: &Customer,
    period: &str,
    today: NaiveDate,
) -> Result<OutgoingMail, MessageError> {
    let invoice_id = invoice.id;
    let email = customer.email.trim();
    let address: Address =
        email.parse().map_err(
            |e: lettre::address::AddressError| MessageError::InvalidAddress {
                invoice_id,
                reason: if email.is_empty() {
                    "the customer has no email address".to_owned()
                } else {
                    e.to_string()
                },
            },
        )?;
    let name = sanitize(&customer.name, MAX_NAME_CHARS);
    let to = Mailbox::new((!name.is_empty()).then(|| name.clone()), address);
    let number = sanitize(&invoice.number, MAX_NUMBER_CHARS);
    let days_overdue = (today - invoice.due_date).num_days().max(0);
    let amount = format_amount(invoice.amount_cents, &invoice.currency);
    let id = message_id(invoice_id, period, &smtp.message_id_domain);
    let greeting = if name.is_empty() {
        "Hello,".to_owned()
    } else {
        format!("Dear {name},")
    };
    let day_word = if days_overdue == 1 { "day" } else { "days" };
    let body = format!(
        "{greeting}\n\n\
         our records show that invoice {number} for {amount}, due on {due}, \
         is {days_overdue} {day_word} overdue.\n\n\
         Invoice:      {number}\n\
         Amount:       {amount}\n\
         Due date:     {due}\n\
         Days overdue: {days_overdue}\n\n\
         If you have already paid, please ignore this message.\n",
        due = invoice.due_date.format("%Y-%m-%d"),
    );
    let message = Message::builder()
        .from(smtp.from.clone())
        .to(to)
        .subject(format!(
            "Payment reminder: invoice {number} is {days_overdue} {day_word} overdue"
        ))
        .message_id(Some(format!("<{id}>")))
        .header(XInvoiceId(invoice_id.to_string()))
        .header(XReminderPeriod(period.to_owned()))
        .header(ContentType::TEXT_PLAIN)
        .body(body)
        .map_err(|e| MessageError::Build {
            invoice_id,
            reason: e.to_string(),
        })?;
    Ok(OutgoingMail {
        invoice_id,
        message_id: id,
        envelope: message.envelope().clone(),
        bytes: message.formatted(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smtp() -> SmtpSettings {
        crate::config::Settings::load(&crate::config::ConfigSource {
            path: None,
            env: vec![(
                "INVOICE_REMINDER__SMTP__MESSAGE_ID_DOMAIN".into(),
                "mail.test".into(),
            )],
        })
        .map(|s| s.smtp)
        .unwrap_or_else(|e| panic!("default settings: {e}"))
    }

    fn invoice() -> Invoice {
        Invoice {
            id: InvoiceId(42),
            number: "INV-7".into(),
            amount_cents: 123_456,
            currency: "EUR".into(),
            due_date: NaiveDate::from_ymd_opt(2026, 11, 20).unwrap_or_default(),
        }
    }

    fn customer(name: &str, email: &str) -> Customer {
        Customer {
            name: name.into(),
            email: email.into(),
        }
    }

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 11, 30).unwrap_or_default()
    }

    #[test]
    fn sanitize_removes_line_breaks_and_truncates() {
        assert_eq!(sanitize("Eve\r\nBcc: x@y", 100), "Eve Bcc: x@y");
        assert_eq!(sanitize("  a \t b  ", 100), "a b");
        assert_eq!(sanitize(&"n".repeat(500), 10).chars().count(), 10);
    }

    #[test]
    fn amounts_have_two_decimals_and_the_currency() {
        assert_eq!(format_amount(123_456, "EUR"), "1234.56 EUR");
        assert_eq!(format_amount(5, "USD"), "0.05 USD");
    }

    #[test]
    fn the_same_reminder_always_gets_the_same_message_id() {
        let a = build_message(
            &smtp(),
            &invoice(),
            &customer("Ada", "ada@example.test"),
            "2026-11-30",
            today(),
        );
        let b = build_message(
            &smtp(),
            &invoice(),
            &customer("Ada", "ada@example.test"),
            "2026-11-30",
            today(),
        );
        let (a, b) = (a.map(|m| m.message_id), b.map(|m| m.message_id));
        assert_eq!(a.as_deref().ok(), Some("invoice-42.2026-11-30@mail.test"));
        assert_eq!(a.ok(), b.ok());
    }

    #[test]
    fn the_message_carries_the_invoice_and_no_injected_header() {
        let mail = build_message(
            &smtp(),
            &invoice(),
            &customer("Eve\r\nBcc: all@evil.test", "eve@example.test"),
            "2026-11-30",
            today(),
        )
        .map(|m| String::from_utf8_lossy(m.formatted()).into_owned())
        .unwrap_or_default();
        assert!(mail.contains("X-Invoice-Id: 42\r\n"), "{mail}");
        assert!(mail.contains("X-Reminder-Period: 2026-11-30\r\n"), "{mail}");
        assert!(
            mail.contains("Message-ID: <invoice-42.2026-11-30@mail.test>"),
            "{mail}"
        );
        assert!(!mail.contains("\r\nBcc:"), "{mail}");
        assert!(
            mail.contains("1234.56 EUR") && mail.contains("10 days overdue"),
            "{mail}"
        );
    }

    #[test]
    fn an_invalid_address_names_the_invoice() {
        let err = build_message(
            &smtp(),
            &invoice(),
            &customer("X", "nope"),
            "2026-11-30",
            today(),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("invoice 42") && err.contains("address"),
            "{err}"
        );
    }
}
