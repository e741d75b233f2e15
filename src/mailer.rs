//! Building reminder messages and handing them to the SMTP server.
//!
//! # Messages
//! Every reminder has a deterministic `Message-ID:
//! <invoice-{id}.{period}@{smtp.message_id_domain}>`, so the same reminder
//! always carries the same id and mail systems can deduplicate, plus
//! `X-Invoice-Id` and `X-Reminder-Period` headers. Customer data (names,
//! invoice numbers) is stripped of control characters and length-limited
//! before it reaches a header, and lettre encodes what remains, so CR/LF in
//! a name can never start a new header. An address that does not parse is a
//! [`MessageError`]: the reminder is discarded with that reason and the
//! others still go out.
//!
//! # Sending, and what we know afterwards
//! We speak SMTP over lettre's connection type with a small pool of our own,
//! because the one thing the job must know after a failure is *whether the
//! server might have accepted the message*:
//! * connecting, EHLO, STARTTLS, AUTH, MAIL, RCPT or DATA failing (network
//!   error, timeout or a 4xx/5xx reply) means nothing was delivered:
//!   [`SendError::NotDelivered`] (a retry is safe);
//! * a 4xx/5xx reply to the end of the message means it was refused:
//!   [`SendError::Refused`], transient or permanent;
//! * a network error or timeout *after* the message body was handed over is
//!   [`SendError::Unknown`]: the server may have accepted it. We never retry
//!   those (at-most-once); the row stays `sending` and `audit` lists it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::NaiveDate;
use lettre::Address;
use lettre::address::Envelope;
use lettre::message::header::{ContentType, Header, HeaderName, HeaderValue};
use lettre::message::{Mailbox, Message};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, TlsParameters};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use secrecy::ExposeSecret;
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout};

use crate::config::{SmtpSettings, SmtpTls};
use crate::db::reminders::ClaimedReminder;

/// Longest customer name we put in a header or greeting.
pub const MAX_NAME_CHARS: usize = 100;
/// Longest invoice number we put in a subject.
pub const MAX_NUMBER_CHARS: usize = 64;
/// Idle pooled connections older than this are closed instead of reused.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// A reminder that cannot become a message; final, never retried.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("invalid email address for invoice {invoice_id}: {reason}")]
    InvalidAddress { invoice_id: i64, reason: String },
    #[error("cannot build the message for invoice {invoice_id}: {reason}")]
    Build { invoice_id: i64, reason: String },
}

/// What happened to a message the server may or may not have.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Nothing was delivered (connection, greeting, AUTH, MAIL, RCPT or DATA
    /// failed). `connect` is true when no connection could be made at all.
    #[error("not delivered: {reason}")]
    NotDelivered {
        reason: String,
        connect: bool,
        permanent: bool,
    },
    /// The server answered the message with a negative reply.
    #[error("refused by the SMTP server: {reason}")]
    Refused { reason: String, permanent: bool },
    /// The message was handed over but no reply came: it may be delivered.
    #[error("delivery unknown: {reason}")]
    Unknown { reason: String },
}

/// A message ready to send.
#[derive(Debug, Clone)]
pub struct OutgoingMail {
    pub invoice_id: i64,
    /// The Message-ID value, without angle brackets.
    pub message_id: String,
    envelope: Envelope,
    bytes: Vec<u8>,
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
pub fn message_id(invoice_id: i64, period: &str, domain: &str) -> String {
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

/// Builds the reminder for one claimed row. `today` is the database's date
/// in the configured zone (the same one the period came from).
pub fn build_message(
    smtp: &SmtpSettings,
    reminder: &ClaimedReminder,
    period: &str,
    today: NaiveDate,
) -> Result<OutgoingMail, MessageError> {
    let invoice_id = reminder.invoice_id;
    let email = reminder.customer_email.trim();
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
    let name = sanitize(&reminder.customer_name, MAX_NAME_CHARS);
    let to = Mailbox::new((!name.is_empty()).then(|| name.clone()), address);
    let number = sanitize(&reminder.number, MAX_NUMBER_CHARS);
    let days_overdue = (today - reminder.due_date).num_days().max(0);
    let amount = format_amount(reminder.amount_cents, &reminder.currency);
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
        due = reminder.due_date.format("%Y-%m-%d"),
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

/// SMTP client with a pool of reused connections. Cheap to clone.
#[derive(Clone)]
pub struct Mailer {
    inner: Arc<MailerInner>,
}

struct MailerInner {
    settings: SmtpSettings,
    /// `smtp.max_per_second`: the earliest instant the next message may start.
    pacer: Option<(Duration, tokio::sync::Mutex<Instant>)>,
    /// One permit per connection that may exist at once (`smtp.pool_size`).
    slots: Semaphore,
    /// Connections that finished a transaction cleanly, with when.
    idle: Mutex<Vec<(AsyncSmtpConnection, Instant)>>,
    hello: ClientId,
}

impl Mailer {
    pub fn new(settings: &SmtpSettings) -> Self {
        Self {
            inner: Arc::new(MailerInner {
                settings: settings.clone(),
                pacer: settings.max_per_second.map(|rate| {
                    (
                        Duration::from_secs(1) / rate,
                        tokio::sync::Mutex::new(Instant::now()),
                    )
                }),
                slots: Semaphore::new(settings.pool_size as usize),
                idle: Mutex::new(Vec::new()),
                hello: ClientId::default(),
            }),
        }
    }

    /// Waits for this message's slot under `smtp.max_per_second` (at once
    /// without a limit). Slots are spaced evenly, shared by every concurrent
    /// send of this replica.
    pub async fn pace(&self) {
        let Some((interval, next)) = &self.inner.pacer else {
            return;
        };
        let slot = {
            let mut next = next.lock().await;
            let slot = (*next).max(Instant::now());
            *next = slot + *interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }

    /// Sends one message. See the module docs for what each error means.
    pub async fn send(&self, mail: &OutgoingMail) -> Result<(), SendError> {
        let inner = &self.inner;
        let _slot = inner
            .slots
            .acquire()
            .await
            .map_err(|_| SendError::NotDelivered {
                reason: "mailer is shut down".into(),
                connect: true,
                permanent: false,
            })?;
        // A pooled connection may have been closed by the server while idle;
        // that shows up before anything is delivered, so one retry on a fresh
        // connection is safe.
        if let Some(conn) = self.take_idle() {
            match self.transact(conn, mail).await {
                Err(SendError::NotDelivered {
                    connect: false,
                    permanent: false,
                    ..
                }) => {}
                other => return other,
            }
        }
        let conn = self.connect().await?;
        self.transact(conn, mail).await
    }

    /// Closes idle connections politely.
    pub async fn shutdown(&self) {
        let idle: Vec<_> = match self.inner.idle.lock() {
            Ok(mut idle) => idle.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for (mut conn, _) in idle {
            let _ = timeout(Duration::from_secs(1), conn.quit()).await;
        }
    }

    fn take_idle(&self) -> Option<AsyncSmtpConnection> {
        let mut idle = self.inner.idle.lock().ok()?;
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < IDLE_LIMIT && !conn.has_broken() {
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, conn: AsyncSmtpConnection) {
        if let Ok(mut idle) = self.inner.idle.lock() {
            idle.push((conn, Instant::now()));
        }
    }

    async fn connect(&self) -> Result<AsyncSmtpConnection, SendError> {
        let s = &self.inner.settings;
        let not_connected = |e: &dyn std::fmt::Display| SendError::NotDelivered {
            reason: format!("cannot connect to SMTP server {}:{}: {e}", s.host, s.port),
            connect: true,
            permanent: false,
        };
        let tls = match s.tls {
            SmtpTls::None => None,
            SmtpTls::Starttls | SmtpTls::Tls => {
                Some(TlsParameters::new(s.host.clone()).map_err(|e| not_connected(&e))?)
            }
        };
        let wrapper = if s.tls == SmtpTls::Tls {
            tls.clone()
        } else {
            None
        };
        let connecting = async {
            let mut conn = match wrapper {
                // Implicit TLS: lettre wraps the socket itself.
                Some(params) => AsyncSmtpConnection::connect_tokio1(
                    (s.host.as_str(), s.port),
                    Some(s.timeout),
                    &self.inner.hello,
                    Some(params),
                    None,
                )
                .await
                .map_err(|e| e.to_string())?,
                None => {
                    let tcp = tokio::net::TcpStream::connect((s.host.as_str(), s.port))
                        .await
                        .map_err(|e| e.to_string())?;
                    // lettre writes the body and the final "." separately;
                    // with Nagle's algorithm the second write waits for the
                    // server's delayed ACK (~40 ms a message).
                    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
                    AsyncSmtpConnection::connect_with_transport(Box::new(tcp), &self.inner.hello)
                        .await
                        .map_err(|e| e.to_string())?
                }
            };
            if s.tls == SmtpTls::Starttls {
                if !conn.can_starttls() {
                    return Err("the server does not offer STARTTLS".to_owned());
                }
                if let Some(params) = tls {
                    conn.starttls(params, &self.inner.hello)
                        .await
                        .map_err(|e| format!("STARTTLS failed: {e}"))?;
                }
            }
            if let (Some(user), Some(password)) = (&s.username, &s.password) {
                let credentials =
                    Credentials::new(user.clone(), password.expose_secret().to_owned());
                conn.auth(&[Mechanism::Plain, Mechanism::Login], &credentials)
                    .await
                    .map_err(|e| format!("authentication failed: {e}"))?;
            }
            Ok::<_, String>(conn)
        };
        match timeout(s.timeout, connecting).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(not_connected(&e)),
            Err(_) => Err(not_connected(&format!(
                "timed out after {}",
                humantime::format_duration(s.timeout)
            ))),
        }
    }

    /// One SMTP transaction. Only a clean success returns the connection to
    /// the pool.
    async fn transact(
        &self,
        mut conn: AsyncSmtpConnection,
        mail: &OutgoingMail,
    ) -> Result<(), SendError> {
        let limit = self.inner.settings.timeout;
        let before_data = |e: StepError| match e {
            StepError::Smtp(e) if e.is_permanent() || e.is_transient() => SendError::NotDelivered {
                reason: e.to_string(),
                connect: false,
                permanent: e.is_permanent(),
            },
            other => SendError::NotDelivered {
                reason: other.to_string(),
                connect: false,
                permanent: false,
            },
        };

        let mut params = Vec::new();
        let non_ascii = mail
            .envelope
            .from()
            .is_some_and(|a| !AsRef::<str>::as_ref(a).is_ascii())
            || mail
                .envelope
                .to()
                .iter()
                .any(|a| !AsRef::<str>::as_ref(a).is_ascii());
        if non_ascii {
            if !conn.server_info().supports_feature(Extension::SmtpUtfEight) {
                return Err(SendError::NotDelivered {
                    reason: "the address is not ASCII and the server does not support SMTPUTF8"
                        .into(),
                    connect: false,
                    permanent: true,
                });
            }
            params.push(MailParameter::SmtpUtfEight);
        }
        if !mail.bytes.is_ascii() {
            params.push(MailParameter::Body(MailBodyParameter::EightBitMime));
        }

        step(
            limit,
            conn.command(Mail::new(mail.envelope.from().cloned(), params)),
        )
        .await
        .map_err(before_data)?;
        for to in mail.envelope.to() {
            step(limit, conn.command(Rcpt::new(to.clone(), vec![])))
                .await
                .map_err(before_data)?;
        }
        step(limit, conn.command(Data)).await.map_err(before_data)?;

        // From here on the server has (part of) the message.
        match step(limit, conn.message(&mail.bytes)).await {
            Ok(_) => {
                self.put_idle(conn);
                Ok(())
            }
            Err(StepError::Smtp(e)) if e.is_permanent() || e.is_transient() => {
                Err(SendError::Refused {
                    reason: e.to_string(),
                    permanent: e.is_permanent(),
                })
            }
            Err(other) => Err(SendError::Unknown {
                reason: other.to_string(),
            }),
        }
    }
}

type LettreSmtpError = lettre::transport::smtp::Error;

enum StepError {
    Smtp(LettreSmtpError),
    Timeout(Duration),
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Smtp(e) => write!(f, "{e}"),
            Self::Timeout(d) => write!(f, "no reply within {}", humantime::format_duration(*d)),
        }
    }
}

async fn step<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, LettreSmtpError>>,
) -> Result<T, StepError> {
    match timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(StepError::Smtp(e)),
        Err(_) => Err(StepError::Timeout(limit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smtp() -> SmtpSettings {
        crate::config::Settings::load(&crate::config::ConfigSource {
            path: Some(concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.toml").into()),
            env: vec![(
                "INVOICE_REMINDER__SMTP__MESSAGE_ID_DOMAIN".into(),
                "mail.test".into(),
            )],
        })
        .map(|s| s.smtp)
        .unwrap_or_else(|e| panic!("default settings: {e}"))
    }

    fn reminder(name: &str, email: &str) -> ClaimedReminder {
        ClaimedReminder {
            reminder_id: 1,
            invoice_id: 42,
            attempts: 0,
            number: "INV-7".into(),
            amount_cents: 123_456,
            currency: "EUR".into(),
            due_date: NaiveDate::from_ymd_opt(2026, 11, 20).unwrap_or_default(),
            customer_name: name.into(),
            customer_email: email.into(),
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
            &reminder("Ada", "ada@example.test"),
            "2026-11-30",
            today(),
        );
        let b = build_message(
            &smtp(),
            &reminder("Ada", "ada@example.test"),
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
            &reminder("Eve\r\nBcc: all@evil.test", "eve@example.test"),
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
        let err = build_message(&smtp(), &reminder("X", "nope"), "2026-11-30", today())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("invoice 42") && err.contains("address"),
            "{err}"
        );
    }
}
