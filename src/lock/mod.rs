//! The lease: who may work a tick, for how long, and what happens when that
//! stops being true.
//!
//! # Why a lock at all
//! The lock saves work and keeps replicas polite: normally exactly one
//! replica works a tick. It is *not* what makes reminders exactly-once;
//! the UNIQUE (invoice_id, period) claim in the database is (see
//! `db::reminders`). Every rule below is written so that when the lock fails
//! (expired TTL, a paused process, a Redis restart or failover) the worst
//! case is wasted work, never a second mail.
//!
//! # The lease rule
//! * **Acquire** with a fresh random token: `SET key token NX PX ttl`. The
//!   key is exactly `lock.key` and its value exactly the token, so an
//!   operator can `GET` it. The token is generated *before* the command; if
//!   the reply is lost (timeout, dropped connection) we never retry with a
//!   new token: we ask once whether the key holds our token, and otherwise
//!   treat the lock as not acquired and let its TTL clean up.
//! * **Trust** the lease only until `t + ttl - margin`, where `t` is the
//!   local monotonic instant at which the last successful acquire or renewal
//!   was *sent* (so network delay only shortens our trust) and
//!   `margin = ttl / 5` ([`safety_margin`]). Past that instant the lease
//!   counts as lost even if Redis never answered: a partitioned holder stops
//!   by itself before another replica can possibly acquire.
//! * **Renew** from a watchdog task ([`watchdog`]) every `lock.renew_every`
//!   (earlier if that would come within a margin of the lease's end) with a
//!   compare-and-PEXPIRE script. A plain `PEXPIRE` could extend a lock that
//!   expired and now belongs to another replica; the script extends only a
//!   key that still holds our token.
//! * **Lost** when a renewal finds the key gone (Redis restarted empty: we
//!   never re-create it) or holding another token, or when the local trust
//!   deadline passes. Losing cancels the [`LeaseGuard`]: the job checks it
//!   before every mail and stops; mail already handed to the SMTP server
//!   finishes. Redisson and ShedLock only log a failed renewal; we stop.
//! * **Release** stops the watchdog first (a late renewal must not revive or
//!   stretch the key), then runs compare-and-delete. With `lock.min_hold`
//!   (ShedLock's `lockAtLeastFor`), a tick that finished sooner leaves the
//!   key to expire at `acquired + min_hold` instead, so a replica whose
//!   clock runs slightly behind cannot run the same cron tick again.
//!
//! # Fencing tokens
//! A process paused longer than the TTL (GC, VM migration, SIGSTOP) wakes up
//! with a stale lease. Its local deadline has passed, so it stops at the next
//! check, but a pause can fall *between* that check and a write. So every
//! acquisition also gets a fencing token (Kleppmann) that grows with every
//! acquisition: Redis `INCR`s a companion key `{lock.key}:fence` in the same
//! script as the `SET NX`; the PostgreSQL backend takes `nextval` of a
//! sequence while holding the lock. Every claim transaction advances a
//! per-lock high-water mark in `lock_fences` only if its token is not older
//! (`UPDATE ... WHERE token <= $mine`) and aborts otherwise
//! ([`LostReason::Fenced`]): once a newer holder has written, a stale one
//! cannot claim a single row. A Redis restarted empty would restart the
//! counter, so acquisition passes the database's high-water mark as a floor.
//!
//! And below all of this, the UNIQUE (invoice_id, period) claim still holds.
//!
//! # Backends
//! * [`RedisLock`] (default): the rules above.
//! * [`PostgresLock`]: a session-level advisory lock on a dedicated
//!   connection; see its module for why, and for how TTL, renewal and
//!   `min_hold` map onto a lock that lives as long as a connection.

mod postgres;
mod redis;
pub mod watchdog;

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::config::{LockBackendKind, Settings};
use crate::metrics::RenewalCounter;

pub use self::postgres::{PostgresLock, advisory_lock_id};
pub use self::redis::RedisLock;
pub use self::watchdog::{LeaseGuard, LostReason};

/// How much of the TTL we refuse to trust: clock drift between processes
/// and the time a send already started may take to finish.
pub fn safety_margin(ttl: Duration) -> Duration {
    ttl / 5
}

/// A failure to talk to the lock backend. Nothing is held when this is
/// returned from `try_acquire`.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("lock backend unavailable: {0}")]
    Backend(String),
    /// The backend refused our credentials or permissions: retrying cannot
    /// help, the configuration must change. The text names the key.
    #[error("{0}")]
    Config(String),
}

impl LockError {
    pub fn is_configuration(&self) -> bool {
        matches!(self, Self::Config(_))
    }
}

/// The result of one attempt to take the lock.
#[derive(Debug)]
pub enum Acquisition {
    Acquired(Box<Lease>),
    /// Another replica holds the lock: normal, skip this tick.
    Held,
    /// The acquiring command's reply was lost and the lock is not ours: we
    /// do not know who holds it. Treated as not acquired; the TTL cleans up.
    Unknown,
}

/// How a release ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The lock was ours and is free now.
    Deleted,
    /// The tick was shorter than `min_hold`; the lock stays held until then.
    HeldForMinHold(Duration),
    /// The lock was gone or belonged to someone else; nothing was touched.
    NotOwner,
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The lock no longer exists (key expired or deleted, Redis restarted
    /// empty, the PostgreSQL session holding it ended).
    Gone,
    /// The key holds another replica's token.
    Stolen,
}

/// Who holds the lock right now, for `status`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Holder {
    /// Redis: the key's value. PostgreSQL advisory locks carry no token.
    pub token: Option<String>,
    /// PostgreSQL: from the holder's `application_name`.
    pub replica_id: Option<String>,
    /// PostgreSQL: the holder's backend pid.
    pub pid: Option<i32>,
    /// Redis: the key's remaining TTL.
    pub ttl_left_ms: Option<i64>,
}

/// Timings every backend shares, from `[lock]`, and where the watchdog
/// counts its renewals.
#[derive(Debug, Clone)]
pub(crate) struct LeaseTimes {
    pub ttl: Duration,
    pub renew_every: Duration,
    pub min_hold: Duration,
    pub renewals: RenewalCounter,
}

/// The configured lock backend. Cheap to clone.
#[derive(Clone)]
pub enum LockBackend {
    Redis(RedisLock),
    Postgres(PostgresLock),
}

/// What renew and release need to know about one held lease.
#[derive(Clone)]
pub(crate) enum Handle {
    Redis { token: Uuid },
    Postgres(postgres::LockConnection),
}

pub(crate) enum AcquireResult {
    Won { handle: Handle, fence: i64 },
    Held,
    Unknown,
}

impl LockBackend {
    /// Builds the configured backend without connecting. Must be called
    /// inside a tokio runtime.
    /// `renewals` counts the watchdog's renewals by result.
    pub fn from_settings(settings: &Settings, renewals: RenewalCounter) -> Result<Self, LockError> {
        let times = LeaseTimes {
            ttl: settings.lock.ttl,
            renew_every: settings.lock.renew_every,
            min_hold: settings.lock.min_hold,
            renewals,
        };
        Ok(match settings.lock.backend {
            LockBackendKind::Redis => Self::Redis(RedisLock::new(settings, times)?),
            LockBackendKind::Postgres => Self::Postgres(PostgresLock::new(settings, times)),
        })
    }

    /// One round trip to the backend (readiness); holds nothing.
    pub async fn ping(&self) -> Result<(), LockError> {
        match self {
            Self::Redis(r) => r.ping().await,
            Self::Postgres(p) => p.ping().await,
        }
    }

    fn times(&self) -> &LeaseTimes {
        match self {
            Self::Redis(r) => &r.times,
            Self::Postgres(p) => &p.times,
        }
    }

    /// `lock.key`: the Redis key, or what the advisory lock id is hashed from.
    pub fn key(&self) -> &str {
        match self {
            Self::Redis(r) => &r.key,
            Self::Postgres(p) => &p.key,
        }
    }

    /// One attempt; never retried with a new token. `fence_floor` is the
    /// highest fencing token the database has seen for this lock: the new
    /// token is always above it.
    pub async fn try_acquire(&self, fence_floor: i64) -> Result<Acquisition, LockError> {
        let token = Uuid::new_v4();
        let sent_at = Instant::now();
        let won = match self {
            Self::Redis(r) => r.try_acquire(token, fence_floor).await?,
            Self::Postgres(p) => p.try_acquire(fence_floor).await?,
        };
        match won {
            AcquireResult::Won { handle, fence } => Ok(Acquisition::Acquired(Box::new(
                self.start_lease(token, fence, handle, sent_at),
            ))),
            AcquireResult::Held => Ok(Acquisition::Held),
            AcquireResult::Unknown => Ok(Acquisition::Unknown),
        }
    }

    fn start_lease(&self, token: Uuid, fence: i64, handle: Handle, acquired_at: Instant) -> Lease {
        let times = self.times().clone();
        let guard = LeaseGuard::new(acquired_at + times.ttl - safety_margin(times.ttl));
        let watchdog = watchdog::Watchdog::spawn(
            self.clone(),
            handle.clone(),
            times.ttl,
            times.renew_every,
            acquired_at,
            guard.clone(),
        );
        Lease {
            token,
            fence,
            acquired_at,
            min_hold: times.min_hold,
            guard,
            handle: Some(handle),
            watchdog: Some(watchdog),
            backend: self.clone(),
        }
    }

    pub(crate) async fn renew(&self, handle: &Handle) -> Result<Renewal, LockError> {
        match (self, handle) {
            (Self::Redis(r), Handle::Redis { token }) => r.renew(*token).await,
            (Self::Postgres(p), Handle::Postgres(holding)) => p.renew(holding).await,
            _ => Err(LockError::Backend(
                "lease handle from another backend".into(),
            )),
        }
    }

    async fn release(
        &self,
        handle: Handle,
        hold_for: Option<Duration>,
    ) -> Result<Released, LockError> {
        match (self, handle) {
            (Self::Redis(r), Handle::Redis { token }) => r.release(token, hold_for).await,
            (Self::Postgres(p), Handle::Postgres(holding)) => p.release(holding, hold_for).await,
            _ => Err(LockError::Backend(
                "lease handle from another backend".into(),
            )),
        }
    }

    /// The current holder, if any.
    pub async fn holder(&self) -> Result<Option<Holder>, LockError> {
        match self {
            Self::Redis(r) => r.holder().await,
            Self::Postgres(p) => p.holder().await,
        }
    }

    /// Waits until locks kept past their tick for `min_hold` are released
    /// (PostgreSQL backend; a no-op for Redis, whose key simply expires).
    pub async fn finish(&self) {
        if let Self::Postgres(p) = self {
            p.finish().await;
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Redis(r) => format!("redis key {:?}", r.key),
            Self::Postgres(p) => {
                format!("postgres advisory lock {} (hash of {:?})", p.lock_id, p.key)
            }
        }
    }
}

/// A lock taken. Drop without [`Lease::release`] stops the watchdog and
/// leaves the lock to lapse (Redis: by its TTL; PostgreSQL: when the
/// connection closes).
pub struct Lease {
    token: Uuid,
    /// Grows with every acquisition of this lock; checked by every claim.
    fence: i64,
    /// When the acquiring command was sent: the start of `min_hold`.
    acquired_at: Instant,
    min_hold: Duration,
    /// Shared with the watchdog and the job; cancelled when the lease is lost.
    guard: LeaseGuard,
    /// The backend's state for this lease (token or session).
    handle: Option<Handle>,
    /// Renews the lease; stopped before release so it cannot stretch it again.
    watchdog: Option<watchdog::Watchdog>,
    backend: LockBackend,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("token", &self.token)
            .field("fence", &self.fence)
            .field("lost", &self.guard.lost_reason())
            .finish()
    }
}

impl Lease {
    /// Random per acquisition; with Redis it is the key's value.
    pub fn token(&self) -> Uuid {
        self.token
    }

    /// The fencing token of this acquisition.
    pub fn fence(&self) -> i64 {
        self.fence
    }

    /// A cheap handle the job checks before each mail.
    pub fn guard(&self) -> LeaseGuard {
        self.guard.clone()
    }

    /// Stops the watchdog, then frees the lock if it is still ours (or,
    /// within `min_hold`, keeps it until `acquired + min_hold`).
    pub async fn release(mut self) -> Result<Released, LockError> {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop().await;
        }
        let held = self.acquired_at.elapsed();
        let hold_for = self
            .min_hold
            .checked_sub(held)
            .filter(|left| !left.is_zero());
        match self.handle.take() {
            Some(handle) => self.backend.release(handle, hold_for).await,
            None => Ok(Released::NotOwner),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Without a release, make sure no renewal outlives us.
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
    }
}
