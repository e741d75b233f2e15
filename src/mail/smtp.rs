//! Handing messages to the SMTP server, and knowing afterwards whether it
//! might have them.
//!
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
//!
//! [`classify`] turns each of these into the [`Delivery`] that is recorded.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, TlsParameters};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use prometheus_client::metrics::histogram::Histogram;
use secrecy::ExposeSecret;
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout};

use super::OutgoingMail;
use crate::config::{SmtpSettings, SmtpTls};
use crate::domain::{Delivery, InvoiceId};

/// Idle pooled connections older than this are closed instead of reused.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

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

impl SendError {
    /// No connection to the SMTP server could be made at all.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::NotDelivered { connect: true, .. })
    }
}

/// What a failed send means for its row: retried later, dropped for good,
/// or unknown. An unreachable server is `Deferred` (no attempt used).
pub fn classify(invoice_id: InvoiceId, e: SendError) -> Delivery {
    let error = e.to_string();
    match e {
        SendError::NotDelivered { connect: true, .. } => Delivery::Deferred { error },
        SendError::NotDelivered {
            permanent: true, ..
        }
        | SendError::Refused {
            permanent: true, ..
        } => {
            tracing::warn!(%invoice_id, %error, "reminder rejected permanently");
            Delivery::Discarded { error }
        }
        SendError::NotDelivered { .. } | SendError::Refused { .. } => {
            tracing::warn!(%invoice_id, %error, "reminder failed; will retry on a later tick");
            Delivery::Failed { error }
        }
        SendError::Unknown { .. } => {
            tracing::error!(%invoice_id, %error, "delivery unknown; the reminder stays 'sending' and is not retried");
            Delivery::Unknown { error }
        }
    }
}

/// SMTP client with a pool of reused connections. Cheap to clone.
#[derive(Clone)]
pub struct Mailer {
    inner: Arc<MailerInner>,
}

struct MailerInner {
    settings: SmtpSettings,
    /// `invoice_reminder_smtp_transaction_duration_seconds`.
    durations: Histogram,
    /// `smtp.max_per_second`: the earliest instant the next message may start.
    pacer: Option<(Duration, tokio::sync::Mutex<Instant>)>,
    /// One permit per connection that may exist at once (`smtp.pool_size`).
    slots: Semaphore,
    /// Connections that finished a transaction cleanly, with when.
    idle: Mutex<Vec<(AsyncSmtpConnection, Instant)>>,
    hello: ClientId,
}

impl Mailer {
    pub fn new(settings: &SmtpSettings, durations: Histogram) -> Self {
        Self {
            inner: Arc::new(MailerInner {
                settings: settings.clone(),
                durations,
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
        let started = Instant::now();
        let result = self.send_once(mail).await;
        self.inner
            .durations
            .observe(started.elapsed().as_secs_f64());
        result
    }

    async fn send_once(&self, mail: &OutgoingMail) -> Result<(), SendError> {
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
