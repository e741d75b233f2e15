//! The SMTP pool: connections reused across messages, at most
//! `smtp.pool_size` of them, paced by `smtp.max_per_second`.
//!
//! Relays limit connections (Office 365 allows 3 at a time, and fronts
//! refuse the extra ones at once, often before the accepted ones have even
//! greeted): a connection refused while others are open or still being set
//! up means "use fewer", not "down". The refused send waits for the others
//! being set up to settle; if one of them succeeds, the pool shrinks for the
//! rest of the tick ([`Mailer::restore_pool_size`] gives the full size back
//! when the next tick starts) and the message waits for a free connection.
//! Only when no connection at all can be made is the server down, and a
//! refusal at connect never costs the message an attempt (see
//! `replies::classify`). A refusal at connect with nothing open that
//! says we send too much (4.7.x, "too many connections") is the relay
//! throttling us, not down: [`SendError::Throttled`], and the
//! pace (`pace`) is what the relay last let us do, set by each tick. A login refusal is reported as such (a
//! configuration problem). A transient reply on a pooled connection is this
//! message's answer, not a broken connection: it is not retried on a fresh
//! one. The counting itself lives in [`super::pool`].

use std::sync::Arc;
use std::time::Duration;

use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, Certificate, TlsParameters};
use lettre::transport::smtp::commands::Ehlo;
use lettre::transport::smtp::extension::ClientId;
use prometheus_client::metrics::histogram::Histogram;
use secrecy::ExposeSecret;
use tokio::time::{Instant, timeout};

use super::OutgoingMail;
use super::pace::{Pace, Seen, Watch};
use super::pool::{Pool, Pooled};
use super::replies::SendError;
use super::replies::says_throttled;
use super::transaction::{Accepted, transact};
use super::written::{OnWritten, Watched, Written};
use crate::config::{SmtpSettings, SmtpTls};

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
    /// The interval between message starts (None: no limit), and the
    /// earliest instant the next message may start: `smtp.max_per_second`,
    /// or slower while the relay throttles ([`Mailer::set_pace`]).
    pacer: tokio::sync::Mutex<(Option<Duration>, Instant)>,
    /// The pace now.
    pace: std::sync::Mutex<Pace>,
    /// What the relay did with this tick's mail.
    watch: Watch,
    /// `smtp.pool_size` connections and transaction slots, fewer while
    /// the server refuses extra connections.
    pool: Pool,
    hello: ClientId,
}

/// A connection made: the session, whether it offers PIPELINING, and what
/// watches its writes (None with implicit TLS).
type Connected = (AsyncSmtpConnection, bool, Option<Arc<Written>>);

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
                pacer: tokio::sync::Mutex::new((
                    settings
                        .max_per_second
                        .map(|rate| Duration::from_secs(1) / rate),
                    Instant::now(),
                )),
                pace: std::sync::Mutex::new(Pace::configured(
                    settings.max_per_second,
                    settings.pool_size,
                )),
                watch: Watch::default(),
                pool: Pool::new(settings.pool_size as usize),
                hello: ClientId::default(),
            }),
        }
    }

    /// Waits for this message's slot under `smtp.max_per_second` (at once
    /// without a limit). Slots are spaced evenly, shared by every concurrent
    /// send of this replica.
    pub async fn pace(&self) {
        let slot = {
            let mut pacer = self.inner.pacer.lock().await;
            let (Some(interval), next) = &mut *pacer else {
                return;
            };
            let slot = (*next).max(Instant::now());
            *next = slot + *interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }

    /// The configured pace: `smtp.max_per_second` and `smtp.pool_size`.
    pub fn configured_pace(&self) -> Pace {
        let s = &self.inner.settings;
        Pace::configured(s.max_per_second, s.pool_size)
    }

    /// The pace now.
    pub fn current_pace(&self) -> Pace {
        *self.inner.pace.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends at `pace` from now on (called as a tick starts, with what the
    /// relay was last found to take).
    pub async fn set_pace(&self, pace: Pace) {
        *self.inner.pace.lock().unwrap_or_else(|p| p.into_inner()) = pace;
        let interval = pace
            .per_second
            .and_then(|rate| Duration::try_from_secs_f64(1.0 / rate).ok());
        self.inner.pacer.lock().await.0 = interval;
        self.inner.pool.resize(pace.connections as usize);
    }

    /// What the relay did with the mail since the last call (the tick's).
    pub fn take_seen(&self) -> Seen {
        self.inner.watch.take()
    }

    /// Gives the pool its full size back: called as a tick starts, so a
    /// relay's refusals shrink the pool for one tick only.
    pub fn restore_pool_size(&self) {
        let restored = self.inner.pool.restore();
        if restored > 0 {
            tracing::debug!(
                connections = self.inner.settings.pool_size,
                "the SMTP pool is back to its full size"
            );
        }
    }

    /// Sends one message, if `may_start` still allows it once a connection
    /// is ours (checked again there: waiting for one may take a while), and
    /// returns the server's final reply. See `transaction` for what each
    /// error means.
    pub async fn send(
        &self,
        mail: &OutgoingMail,
        may_start: &(dyn Fn() -> bool + Sync),
        on_written: Option<OnWritten>,
    ) -> Result<Accepted, SendError> {
        let started = Instant::now();
        self.inner.watch.started();
        let result = self.send_once(mail, may_start, on_written).await;
        self.inner
            .durations
            .observe(started.elapsed().as_secs_f64());
        match &result {
            Ok(_) => self.inner.watch.accepted(),
            Err(SendError::Throttled { .. }) => self.inner.watch.throttled(),
            Err(_) => {}
        }
        result
    }

    async fn send_once(
        &self,
        mail: &OutgoingMail,
        may_start: &(dyn Fn() -> bool + Sync),
        mut on_written: Option<OnWritten>,
    ) -> Result<Accepted, SendError> {
        let pool = &self.inner.pool;
        let limit = self.inner.settings.timeout;
        loop {
            let slot = pool.acquire().await.map_err(|_| SendError::NotStarted)?;
            if let Some(pooled) = pool.take_idle() {
                if !may_start() {
                    pool.put_idle(pooled);
                    return Err(SendError::NotStarted);
                }
                // A connection that breaks before its first reply (the
                // server closed it while idle) gets the message on a fresh
                // one: nothing was delivered, and its end never left us.
                let (on_retry, on_this) = split_callback(on_written.take());
                match self.transact(pooled, mail, on_this).await {
                    Err(SendError::NotDelivered { replied: false, .. }) => {
                        on_written = on_retry
                            .and_then(|r| r.lock().unwrap_or_else(|p| p.into_inner()).take())
                    }
                    other => return other,
                }
            }
            let connecting = pool.connecting();
            match self.connect().await {
                Ok((conn, pipelining, written)) => {
                    let pooled = connecting.opened(conn, pipelining, written);
                    if !may_start() {
                        pool.put_idle(pooled);
                        return Err(SendError::NotStarted);
                    }
                    return self.transact(pooled, mail, on_written).await;
                }
                Err(ConnectError::LoginRefused(reason)) => {
                    return Err(SendError::LoginRefused { reason });
                }
                Err(refused @ (ConnectError::Busy(_) | ConnectError::Failed(_))) => {
                    let (ConnectError::Busy(reason)
                    | ConnectError::Failed(reason)
                    | ConnectError::LoginRefused(reason)) = &refused;
                    let reason = reason.clone();
                    drop(connecting);
                    // Others exist if a connection that may still work is
                    // open, or one is still being set up: then wait for those
                    // to settle. Down only if none of them succeeds.
                    pool.prune_idle();
                    let settled = pool
                        .wait_until(limit, |c| c.open > 0 || c.connecting == 0)
                        .await;
                    if settled.open == 0 {
                        return Err(match refused {
                            // It answered that we send too much: up, but
                            // not for us now.
                            ConnectError::Busy(_) if says_throttled(&reason) => {
                                SendError::Throttled { reason }
                            }
                            _ => SendError::NotDelivered {
                                reason,
                                connect: true,
                                permanent: false,
                                replied: false,
                            },
                        });
                    }
                    self.use_fewer(slot, &reason);
                    // Wait for a connection to come free (or for all to close,
                    // when a fresh one is worth a try).
                    pool.wait_until(limit, |c| c.idle > 0 || c.open == 0).await;
                }
            }
        }
    }

    /// The server refused one more connection: shrink the pool by one
    /// (keeping at least one), logging the new size.
    fn use_fewer(&self, slot: tokio::sync::SemaphorePermit<'_>, reason: &str) {
        if let Some(connections) = self.inner.pool.use_fewer(slot) {
            tracing::warn!(
                connections,
                reason,
                "the SMTP server refused another connection; using fewer for the rest of this tick"
            );
        }
    }

    /// Closes idle connections politely.
    pub async fn shutdown(&self) {
        for mut pooled in self.inner.pool.drain_idle() {
            let _ = timeout(Duration::from_secs(1), pooled.conn.quit()).await;
        }
    }

    /// One transaction on `pooled`, which goes back to the pool if it can
    /// be reused and is closed (no longer counted open) otherwise.
    async fn transact(
        &self,
        mut pooled: Pooled,
        mail: &OutgoingMail,
        on_written: Option<OnWritten>,
    ) -> Result<Accepted, SendError> {
        let (result, reusable) = transact(
            &mut pooled.conn,
            pooled.written.as_deref(),
            on_written,
            pooled.pipelining,
            mail,
            self.inner.settings.timeout,
        )
        .await;
        if reusable {
            self.inner.pool.put_idle(pooled);
        }
        result
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

    /// A new connection, greeted, upgraded and logged in as configured,
    /// whether the server offers PIPELINING on it, and (but with implicit
    /// TLS, where lettre opens the socket) what watches its writes.
    async fn connect(&self) -> Result<Connected, ConnectError> {
        let s = &self.inner.settings;
        let at = |e: &dyn std::fmt::Display| {
            format!("cannot connect to SMTP server {}:{}: {e}", s.host, s.port)
        };
        let tls = self.tls().map_err(|e| ConnectError::Failed(at(&e)))?;
        let connecting = async {
            let mut watch = None;
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
                    // Each write waits for its reply before the next, but a
                    // write that ever followed an unanswered one would wait
                    // for the server's delayed ACK under Nagle's algorithm
                    // (~40 ms a message, as when lettre wrote the content
                    // and the final "." separately).
                    tcp.set_nodelay(true)
                        .map_err(|e| ConnectError::Failed(at(&e)))?;
                    let written = Arc::new(Written::default());
                    watch = Some(Arc::clone(&written));
                    AsyncSmtpConnection::connect_with_transport(
                        Box::new(Watched::new(tcp, written)),
                        &self.inner.hello,
                    )
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
            let pipelining = offers_pipelining(&mut conn, &self.inner.hello).await;
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
            Ok::<_, ConnectError>((conn, pipelining, watch))
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

/// Whether the server offers PIPELINING: lettre keeps only the EHLO
/// keywords it uses itself, so the EHLO is asked again (once per
/// connection, before AUTH) and its lines read. Any trouble: no.
async fn offers_pipelining(conn: &mut AsyncSmtpConnection, hello: &ClientId) -> bool {
    match conn.command(Ehlo::new(hello.clone())).await {
        Ok(response) => response
            .message()
            .any(|line| line.trim().eq_ignore_ascii_case("PIPELINING")),
        Err(_) => false,
    }
}

/// A callback kept aside while a transaction may call it.
type Kept = Arc<std::sync::Mutex<Option<OnWritten>>>;

/// `on_written` for one transaction, and a way to get it back if that
/// transaction ends before the message's end left us: the callback is
/// kept in a shared slot, and the transaction gets one that takes it out.
fn split_callback(on_written: Option<OnWritten>) -> (Option<Kept>, Option<OnWritten>) {
    let Some(call) = on_written else {
        return (None, None);
    };
    let slot = Arc::new(std::sync::Mutex::new(Some(call)));
    let taken = Arc::clone(&slot);
    let on_this: OnWritten = Box::new(move || {
        let call = taken.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(call) = call {
            call();
        }
    });
    (Some(slot), Some(on_this))
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
