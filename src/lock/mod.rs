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
//! # What the lock cannot do
//! A process paused longer than the TTL (GC, VM migration, SIGSTOP) wakes up
//! with a stale lease. Its local deadline has passed, so it stops at the next
//! check, but a write already on the wire cannot be recalled; that is why
//! the database refuses a second claim of the same (invoice, period).

mod redis;
pub mod watchdog;

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::config::Settings;

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
}

/// The result of one attempt to take the lock.
#[derive(Debug)]
pub enum Acquisition {
    Acquired(Box<Lease>),
    /// Another replica holds the lock: normal, skip this tick.
    Held,
    /// The SET's reply was lost and the key does not hold our token: we do
    /// not know who holds it. Treated as not acquired; the TTL cleans up.
    Unknown,
}

/// How a release ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The key held our token and was deleted.
    Deleted,
    /// The tick was shorter than `min_hold`; the key stays until then.
    HeldForMinHold(Duration),
    /// The key was gone or belonged to someone else; nothing was touched.
    NotOwner,
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The key no longer exists (expired, deleted, Redis restarted empty).
    Gone,
    /// The key holds another replica's token.
    Stolen,
}

/// Who holds the lock right now, for `status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Holder {
    pub token: String,
    pub ttl_left_ms: Option<i64>,
}

/// The configured lock backend. Cheap to clone.
#[derive(Clone)]
pub enum LockBackend {
    Redis(RedisLock),
}

impl LockBackend {
    pub fn from_settings(settings: &Settings) -> Result<Self, LockError> {
        Ok(Self::Redis(RedisLock::new(settings)?))
    }

    /// One attempt; never retried with a new token.
    pub async fn try_acquire(&self) -> Result<Acquisition, LockError> {
        let token = Uuid::new_v4();
        let sent_at = Instant::now();
        let won = match self {
            Self::Redis(r) => r.try_acquire(token).await?,
        };
        match won {
            AcquireResult::Won => Ok(Acquisition::Acquired(Box::new(
                self.start_lease(token, sent_at),
            ))),
            AcquireResult::Held => Ok(Acquisition::Held),
            AcquireResult::Unknown => Ok(Acquisition::Unknown),
        }
    }

    fn start_lease(&self, token: Uuid, acquired_at: Instant) -> Lease {
        let (ttl, renew_every, min_hold) = match self {
            Self::Redis(r) => (r.ttl, r.renew_every, r.min_hold),
        };
        let guard = LeaseGuard::new(acquired_at + ttl - safety_margin(ttl));
        let watchdog = watchdog::Watchdog::spawn(
            self.clone(),
            token,
            ttl,
            renew_every,
            acquired_at,
            guard.clone(),
        );
        Lease {
            token,
            acquired_at,
            min_hold,
            guard,
            watchdog: Some(watchdog),
            backend: self.clone(),
        }
    }

    pub(crate) async fn renew(&self, token: Uuid) -> Result<Renewal, LockError> {
        match self {
            Self::Redis(r) => r.renew(token).await,
        }
    }

    async fn release(
        &self,
        token: Uuid,
        hold_for: Option<Duration>,
    ) -> Result<Released, LockError> {
        match self {
            Self::Redis(r) => r.release(token, hold_for).await,
        }
    }

    /// The current holder, if any.
    pub async fn holder(&self) -> Result<Option<Holder>, LockError> {
        match self {
            Self::Redis(r) => r.holder().await,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Redis(r) => format!("redis key {:?}", r.key),
        }
    }
}

pub(crate) enum AcquireResult {
    Won,
    Held,
    Unknown,
}

/// A held lock. Drop without [`Lease::release`] stops the watchdog and
/// leaves the key to expire by its TTL.
pub struct Lease {
    token: Uuid,
    /// When the acquiring command was sent: the start of `min_hold`.
    acquired_at: Instant,
    min_hold: Duration,
    /// Shared with the watchdog and the job; cancelled when the lease is lost.
    guard: LeaseGuard,
    /// Renews the key; stopped before release so it cannot stretch it again.
    watchdog: Option<watchdog::Watchdog>,
    backend: LockBackend,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("token", &self.token)
            .field("lost", &self.guard.lost_reason())
            .finish()
    }
}

impl Lease {
    pub fn token(&self) -> Uuid {
        self.token
    }

    /// A cheap handle the job checks before each mail.
    pub fn guard(&self) -> LeaseGuard {
        self.guard.clone()
    }

    /// Stops the watchdog, then deletes the key if it is still ours (or,
    /// within `min_hold`, shortens its expiry to `acquired + min_hold`).
    pub async fn release(mut self) -> Result<Released, LockError> {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop().await;
        }
        let held = self.acquired_at.elapsed();
        let hold_for = self
            .min_hold
            .checked_sub(held)
            .filter(|left| !left.is_zero());
        self.backend.release(self.token, hold_for).await
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

/// Keeps the lease types usable from tests that need a guard with no lock
/// behind it (the database-backstop tests).
pub fn unguarded() -> LeaseGuard {
    LeaseGuard::unbounded()
}
