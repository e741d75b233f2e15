//! The SMTP pool: connections reused across messages, at most
//! `smtp.pool_size` of them, paced by the pacer (`pace`).
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
//! `replies::classify`).
//!
//! A relay that throttles (4.7.x or "too many connections" on connect,
//! EHLO or MAIL, "too much mail") is up: the send waits in the pacer's
//! halt and tries again, as many times as the pacer allows, before the
//! data was ever sent; only when the pacer gives up (the tick's bound) or
//! the tick stops does it end [`SendError::Throttled`] or
//! [`SendError::NotStarted`], the message unattempted. A login refusal is
//! reported as such (a configuration problem). A transient reply on a
//! pooled connection is this message's answer, not a broken connection:
//! it is not retried on a fresh one. The counting itself lives in
//! [`super::pool`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lettre::transport::smtp::client::Certificate;
use lettre::transport::smtp::extension::ClientId;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::{Instant, timeout};

use super::OutgoingMail;
use super::connect::{ConnectError, Connector};
use super::pace::{NotReady, Pacer};
use super::pool::{Pool, Slot};
use super::replies::SendError;
use super::replies::says_throttled;
use super::ride::{Board, Handoff, Seats};
use super::transaction::Accepted;
use super::written::OnWritten;
use crate::config::SmtpSettings;

/// What stops a send that waits: resolves when the tick stops.
pub type Stopped<'a> = dyn Future<Output = ()> + Send + Unpin + 'a;

/// Asked once a connection is the send's own, just before its message
/// goes (waiting for the pacer's slot and the connection may have taken
/// a while): whether it may still start.
pub trait Gate: Sync {
    fn may_start(&self) -> std::pin::Pin<Box<dyn Future<Output = bool> + Send + '_>>;
}

/// Where a send's time goes, told as it goes: waiting for the pacer's
/// slot, for a connection of the pool (a new one's set-up included), and
/// for the relay's replies.
pub trait SendWaits: Sync {
    fn pacer(&self, took: Duration);
    fn pool(&self, took: Duration);
    fn relay(&self, took: Duration);
    /// The connection a letter took had stood idle this long since its
    /// last message: time the relay could have been taking mail.
    fn idle(&self, took: Duration);
}

/// Waits told to no one.
pub struct Untold;

impl SendWaits for Untold {
    fn pacer(&self, _: Duration) {}
    fn pool(&self, _: Duration) {}
    fn relay(&self, _: Duration) {}
    fn idle(&self, _: Duration) {}
}

/// A gate that always opens.
pub struct Open;

impl Gate for Open {
    fn may_start(&self) -> std::pin::Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(std::future::ready(true))
    }
}

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
    /// How fast the relay lets us send.
    pacer: Pacer,
    /// `smtp.pool_size` connections and transaction slots, fewer while
    /// the server refuses extra connections.
    pool: Pool,
    /// Messages waiting for a connection whose envelope may ride on the
    /// end of another's (`ride`).
    board: Board,
    hello: ClientId,
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
                pacer: Pacer::new(settings.max_per_second),
                pool: Pool::new(settings.pool_size as usize),
                board: Board::default(),
                hello: ClientId::default(),
            }),
        }
    }

    /// The pacer: what the relay was found to take, and what it did.
    pub fn pacer(&self) -> &Pacer {
        &self.inner.pacer
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

    /// Sends one message when the pacer gives it a slot, if `gate` still
    /// allows it once a connection is ours (asked there: waiting for the
    /// slot and the connection may take a while), and returns the server's final
    /// reply. `stopped` resolving ends a wait for the pacer at once. See
    /// `transaction` for what each error means.
    pub async fn send(
        &self,
        mail: &OutgoingMail,
        gate: &dyn Gate,
        stopped: &mut Stopped<'_>,
        on_written: Option<OnWritten>,
        waits: &dyn SendWaits,
    ) -> Result<Accepted, SendError> {
        let pacer = &self.inner.pacer;
        let kept = on_written.map(|call| Arc::new(std::sync::Mutex::new(Some(call))));
        loop {
            let asked = Instant::now();
            let ready = pacer.ready(stopped).await;
            waits.pacer(asked.elapsed());
            let slot = match ready {
                Ok(slot) => slot,
                Err(NotReady::Stopped) => return Err(SendError::NotStarted),
                Err(NotReady::GaveUp) => {
                    return Err(SendError::Throttled {
                        reason: "the relay's pace (its refusals, or the rate learnt from them) goes past this tick's bound".into(),
                    });
                }
            };
            let started = Instant::now();
            let result = self.send_once(mail, gate, kept.as_ref(), waits).await;
            self.inner
                .durations
                .observe(started.elapsed().as_secs_f64());
            match &result {
                Ok(_) => {
                    if let Some(per_second) = pacer.accepted(slot) {
                        tracing::info!(
                            per_second,
                            "the SMTP relay takes mail again; sending is paced at {per_second:.2} messages a second, a little below the rate it accepted between its last two throttles"
                        );
                    }
                }
                Err(SendError::Throttled { reason }) => {
                    if pacer.throttled(slot) {
                        tracing::warn!(
                            reason,
                            "the SMTP relay throttles us; sending halts until it takes mail again (no attempt is used)"
                        );
                    }
                    continue;
                }
                Err(SendError::NotStarted) => pacer.returned(slot),
                Err(_) => pacer.answered(slot),
            }
            return result;
        }
    }

    async fn send_once(
        &self,
        mail: &OutgoingMail,
        gate: &dyn Gate,
        kept: Option<&Kept>,
        waits: &dyn SendWaits,
    ) -> Result<Accepted, SendError> {
        let pool = &self.inner.pool;
        let limit = self.inner.settings.timeout;
        loop {
            let asked = Instant::now();
            let (slot, handed) = self.seats().slot_for(mail).await?;
            let reused = match handed {
                // Our envelope went out after the last message on it.
                Some(Handoff::Ready(pooled)) => Some((*pooled, Duration::ZERO, true)),
                Some(Handoff::Broken) => None,
                None => pool.take_idle().map(|(pooled, idle)| (pooled, idle, false)),
            };
            let mut slot = Some(slot);
            if let Some((pooled, idle, envelope_written)) = reused {
                waits.pool(asked.elapsed());
                waits.idle(idle);
                if !gate.may_start().await {
                    // With our envelope written, DATA's 354 waits on it for
                    // a body that never comes: it is closed instead.
                    if !envelope_written {
                        pool.put_idle(pooled);
                    }
                    return Err(SendError::NotStarted);
                }
                // A connection that breaks before its first reply (the
                // server closed it while idle) gets the message on a fresh
                // one: nothing was delivered, and its end never left us.
                let (result, back) = self
                    .transact(pooled, envelope_written, slot.take(), mail, kept, waits)
                    .await;
                match result {
                    Err(SendError::NotDelivered { replied: false, .. }) if back.is_some() => {
                        slot = back;
                    }
                    other => return other,
                }
            }
            let Some(slot) = slot else {
                continue;
            };
            let connecting = pool.connecting();
            let opening = Instant::now();
            match self.connector().connect().await {
                Ok((conn, pipelining, written)) => {
                    waits.pool(opening.elapsed());
                    let pooled = connecting.opened(conn, pipelining, written);
                    if !gate.may_start().await {
                        pool.put_idle(pooled);
                        return Err(SendError::NotStarted);
                    }
                    let sent = self.transact(pooled, false, Some(slot), mail, kept, waits);
                    return sent.await.0;
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
    fn use_fewer(&self, slot: Slot, reason: &str) {
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

    /// One transaction on `pooled` (`ride::Seats::transact`), its time
    /// told as the relay's.
    async fn transact(
        &self,
        pooled: super::pool::Pooled,
        envelope_written: bool,
        slot: Option<Slot>,
        mail: &OutgoingMail,
        kept: Option<&Kept>,
        waits: &dyn SendWaits,
    ) -> (Result<Accepted, SendError>, Option<Slot>) {
        let started = Instant::now();
        let seats = self.seats();
        let sent = seats.transact(pooled, envelope_written, slot, mail, caller(kept));
        let ended = sent.await;
        waits.relay(started.elapsed());
        ended
    }

    /// The pool and its board, for one send.
    fn seats(&self) -> Seats<'_> {
        Seats {
            pool: &self.inner.pool,
            board: &self.inner.board,
            limit: self.inner.settings.timeout,
        }
    }

    fn connector(&self) -> Connector<'_> {
        Connector {
            settings: &self.inner.settings,
            extra_root: self.inner.extra_root.as_ref(),
            hello: &self.inner.hello,
        }
    }
}

/// A callback kept aside while transactions may call it: each gets one
/// that takes it out, so it runs once, in the transaction whose message's
/// end left us.
type Kept = Arc<std::sync::Mutex<Option<OnWritten>>>;

fn caller(kept: Option<&Kept>) -> Option<OnWritten> {
    let taken = Arc::clone(kept?);
    Some(Box::new(move || {
        let call = taken.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(call) = call {
            call();
        }
    }))
}
