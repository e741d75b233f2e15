//! The SMTP pool: connections reused across messages, at most
//! `smtp.pool_size` of them, paced by `smtp.max_per_second`.
//!
//! Relays limit connections (Office 365 allows 3 at a time): a connection
//! refused while others are open means "use fewer", not "down", so the pool
//! shrinks for the rest of the tick and the message waits for one of the
//! open connections. Only when no connection at all can be made is the
//! server down. A login refusal is reported as such (a configuration
//! problem). A transient reply on a pooled connection is this message's
//! answer, not a broken connection: it is not retried on a fresh one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, Certificate, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use prometheus_client::metrics::histogram::Histogram;
use secrecy::ExposeSecret;
use tokio::sync::{Notify, Semaphore};
use tokio::time::{Instant, timeout};

use super::OutgoingMail;
use super::transaction::{SendError, transact};
use crate::config::{SmtpSettings, SmtpTls};

/// Idle pooled connections older than this are closed instead of reused.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// SMTP client with a pool of reused connections. Cheap to clone.
#[derive(Clone)]
pub struct Mailer {
    inner: Arc<MailerInner>,
}

struct MailerInner {
    settings: SmtpSettings,
    /// `smtp.ca_file`, read once.
    extra_root: Option<Certificate>,
    /// `invoice_reminder_smtp_transaction_duration_seconds`.
    durations: Histogram,
    /// `smtp.max_per_second`: the earliest instant the next message may start.
    pacer: Option<(Duration, tokio::sync::Mutex<Instant>)>,
    /// One permit per transaction that may run at once: `smtp.pool_size`,
    /// fewer after the server refused extra connections.
    slots: Semaphore,
    /// How many permits `slots` holds in all now.
    capacity: AtomicUsize,
    /// Connections open (idle or in use).
    open: AtomicUsize,
    /// Connections that can take the next message, with when they got idle.
    idle: Mutex<Vec<(AsyncSmtpConnection, Instant)>>,
    /// Signalled when a connection becomes idle.
    returned: Notify,
    hello: ClientId,
}

/// Why no connection could be made.
enum ConnectError {
    /// The server answered, but not with a session for us (421 too many
    /// connections, or a 4xx greeting).
    Busy(String),
    LoginRefused(String),
    Failed(String),
}

impl Mailer {
    pub fn new(settings: &SmtpSettings, durations: Histogram) -> Self {
        let extra_root = settings
            .ca_file
            .as_ref()
            .and_then(|path| std::fs::read(path).ok())
            .and_then(|pem| Certificate::from_pem(&pem).ok());
        Self {
            inner: Arc::new(MailerInner {
                settings: settings.clone(),
                extra_root,
                durations,
                pacer: settings.max_per_second.map(|rate| {
                    (
                        Duration::from_secs(1) / rate,
                        tokio::sync::Mutex::new(Instant::now()),
                    )
                }),
                slots: Semaphore::new(settings.pool_size as usize),
                capacity: AtomicUsize::new(settings.pool_size as usize),
                open: AtomicUsize::new(0),
                idle: Mutex::new(Vec::new()),
                returned: Notify::new(),
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

    /// Gives the pool its full size back (a tick starts afresh).
    pub fn restore_pool_size(&self) {
        let full = self.inner.settings.pool_size as usize;
        let now = self.inner.capacity.swap(full, Ordering::SeqCst);
        if now < full {
            self.inner.slots.add_permits(full - now);
        }
    }

    /// Sends one message, if `may_start` still allows it once a connection
    /// is ours (checked again there: waiting for one may take a while). See
    /// `transaction` for what each error means.
    pub async fn send(
        &self,
        mail: &OutgoingMail,
        may_start: &(dyn Fn() -> bool + Sync),
    ) -> Result<(), SendError> {
        let started = Instant::now();
        let result = self.send_once(mail, may_start).await;
        self.inner
            .durations
            .observe(started.elapsed().as_secs_f64());
        result
    }

    async fn send_once(
        &self,
        mail: &OutgoingMail,
        may_start: &(dyn Fn() -> bool + Sync),
    ) -> Result<(), SendError> {
        let inner = &self.inner;
        loop {
            let slot = inner
                .slots
                .acquire()
                .await
                .map_err(|_| SendError::NotStarted)?;
            if let Some(conn) = self.take_idle() {
                if !may_start() {
                    self.put_idle(conn);
                    return Err(SendError::NotStarted);
                }
                match self.transact(conn, mail).await {
                    // The connection broke while idle (the server closed it):
                    // nothing was delivered, so a fresh one is safe.
                    Err(SendError::NotDelivered { replied: false, .. }) => {}
                    other => return other,
                }
            }
            match self.connect().await {
                Ok(conn) => {
                    inner.open.fetch_add(1, Ordering::SeqCst);
                    if !may_start() {
                        self.put_idle(conn);
                        return Err(SendError::NotStarted);
                    }
                    return self.transact(conn, mail).await;
                }
                Err(ConnectError::LoginRefused(reason)) => {
                    return Err(SendError::LoginRefused { reason });
                }
                Err(ConnectError::Busy(reason) | ConnectError::Failed(reason))
                    if inner.open.load(Ordering::SeqCst) > 0 =>
                {
                    self.use_fewer(slot, &reason);
                    // Wait for one of the open connections.
                    let _ = timeout(inner.settings.timeout, inner.returned.notified()).await;
                }
                Err(ConnectError::Busy(reason) | ConnectError::Failed(reason)) => {
                    return Err(SendError::NotDelivered {
                        reason,
                        connect: true,
                        permanent: false,
                        replied: false,
                    });
                }
            }
        }
    }

    /// The server refused one more connection: shrink the pool by one
    /// (keeping at least one), logging the new size once per size.
    fn use_fewer(&self, slot: tokio::sync::SemaphorePermit<'_>, reason: &str) {
        let inner = &self.inner;
        let capacity = inner.capacity.load(Ordering::SeqCst);
        if capacity > 1
            && inner
                .capacity
                .compare_exchange(capacity, capacity - 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            slot.forget();
            tracing::warn!(
                connections = capacity - 1,
                reason,
                "the SMTP server refused another connection; using fewer for the rest of this tick"
            );
        }
    }

    /// Closes idle connections politely.
    pub async fn shutdown(&self) {
        let idle: Vec<_> = match self.inner.idle.lock() {
            Ok(mut idle) => idle.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for (mut conn, _) in idle {
            self.inner.open.fetch_sub(1, Ordering::SeqCst);
            let _ = timeout(Duration::from_secs(1), conn.quit()).await;
        }
    }

    async fn transact(
        &self,
        conn: AsyncSmtpConnection,
        mail: &OutgoingMail,
    ) -> Result<(), SendError> {
        let (result, conn) = transact(conn, mail, self.inner.settings.timeout).await;
        match conn {
            Some(conn) => self.put_idle(conn),
            None => {
                self.inner.open.fetch_sub(1, Ordering::SeqCst);
            }
        }
        result
    }

    fn take_idle(&self) -> Option<AsyncSmtpConnection> {
        let mut idle = self.inner.idle.lock().ok()?;
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < IDLE_LIMIT && !conn.has_broken() {
                return Some(conn);
            }
            self.inner.open.fetch_sub(1, Ordering::SeqCst);
        }
        None
    }

    fn put_idle(&self, conn: AsyncSmtpConnection) {
        if let Ok(mut idle) = self.inner.idle.lock() {
            idle.push((conn, Instant::now()));
        }
        self.inner.returned.notify_one();
    }

    fn tls(&self) -> Result<Option<TlsParameters>, String> {
        let s = &self.inner.settings;
        if s.tls == SmtpTls::None {
            return Ok(None);
        }
        let mut builder = TlsParameters::builder(s.host.clone());
        if let Some(cert) = &self.inner.extra_root {
            builder = builder.add_root_certificate(cert.clone());
        }
        builder.build_rustls().map(Some).map_err(|e| e.to_string())
    }

    async fn connect(&self) -> Result<AsyncSmtpConnection, ConnectError> {
        let s = &self.inner.settings;
        let at = |e: &dyn std::fmt::Display| {
            format!("cannot connect to SMTP server {}:{}: {e}", s.host, s.port)
        };
        let tls = self.tls().map_err(|e| ConnectError::Failed(at(&e)))?;
        let connecting = async {
            let mut conn = match (s.tls, tls.clone()) {
                // Implicit TLS: lettre wraps the socket itself.
                (SmtpTls::Tls, Some(params)) => AsyncSmtpConnection::connect_tokio1(
                    (s.host.as_str(), s.port),
                    Some(s.timeout),
                    &self.inner.hello,
                    Some(params),
                    None,
                )
                .await
                .map_err(|e| refusal(&e, at(&e)))?,
                _ => {
                    let tcp = tokio::net::TcpStream::connect((s.host.as_str(), s.port))
                        .await
                        .map_err(|e| ConnectError::Failed(at(&e)))?;
                    // lettre writes the body and the final "." separately;
                    // with Nagle's algorithm the second write waits for the
                    // server's delayed ACK (~40 ms a message).
                    tcp.set_nodelay(true)
                        .map_err(|e| ConnectError::Failed(at(&e)))?;
                    AsyncSmtpConnection::connect_with_transport(Box::new(tcp), &self.inner.hello)
                        .await
                        .map_err(|e| refusal(&e, at(&e)))?
                }
            };
            if s.tls == SmtpTls::Starttls {
                if !conn.can_starttls() {
                    return Err(ConnectError::Failed(at(
                        &"the server does not offer STARTTLS",
                    )));
                }
                if let Some(params) = tls {
                    conn.starttls(params, &self.inner.hello)
                        .await
                        .map_err(|e| ConnectError::Failed(at(&format!("STARTTLS failed: {e}"))))?;
                }
            }
            if let (Some(user), Some(password)) = (&s.username, &s.password) {
                let credentials =
                    Credentials::new(user.clone(), password.expose_secret().to_owned());
                if let Err(e) = conn
                    .auth(&[Mechanism::Plain, Mechanism::Login], &credentials)
                    .await
                {
                    return Err(if e.is_permanent() {
                        ConnectError::LoginRefused(format!("{} (smtp.username {user:?})", e))
                    } else {
                        refusal(&e, at(&format!("authentication failed: {e}")))
                    });
                }
            }
            Ok::<_, ConnectError>(conn)
        };
        match timeout(s.timeout, connecting).await {
            Ok(result) => result,
            Err(_) => Err(ConnectError::Failed(at(&format!(
                "timed out after {}",
                humantime::format_duration(s.timeout)
            )))),
        }
    }
}

/// A connect error with a 4xx reply is the server being busy with us
/// (too many connections); anything else is a failure to connect.
fn refusal(e: &lettre::transport::smtp::Error, message: String) -> ConnectError {
    if e.is_transient() {
        ConnectError::Busy(message)
    } else {
        ConnectError::Failed(message)
    }
}
