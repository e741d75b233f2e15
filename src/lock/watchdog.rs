//! Renewal tied to a guard: a background task that keeps a lease alive while
//! the job runs, and the [`LeaseGuard`] the job consults before each mail.
//!
//! The watchdog runs on its own tokio task, so a tick busy with queries or
//! SMTP cannot starve it. It stops in three ways: the lease is released
//! (`stop`, awaited, so no renewal is in flight afterwards), the lease is
//! dropped (`abort`), or the lease is lost (it cancels the guard and exits).
//!
//! The guard is the only thing the job needs to know about locking:
//! [`LeaseGuard::check`] fails once the lease is lost *or* once the local
//! trust deadline has passed, even if the watchdog task never got to run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Handle, LockBackend, Renewal, safety_margin};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// Why a lease stopped being trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// A renewal found the key missing (expired, or Redis restarted empty).
    Gone,
    /// A renewal found another replica's token in the key.
    Stolen,
    /// The local trust deadline passed without a successful renewal
    /// (backend unreachable or too slow, or this process was paused).
    Expired,
    /// A claim found that a newer lock holder has already written
    /// (fencing token older than the database's high-water mark).
    Fenced,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Gone => "the lock key is gone",
            Self::Stolen => "the lock key holds another replica's token",
            Self::Expired => "the lease lapsed before it could be renewed",
            Self::Fenced => "a newer lock holder has already written (fencing token too old)",
        })
    }
}

/// Shared view of a lease's validity. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LeaseGuard {
    inner: Arc<GuardState>,
}

#[derive(Debug)]
struct GuardState {
    /// Reference point for `valid_until_nanos`.
    origin: Instant,
    /// Local monotonic deadline, as nanoseconds after `origin`; `u64::MAX`
    /// for a guard with no deadline.
    valid_until_nanos: AtomicU64,
    lost: CancellationToken,
    reason: Mutex<Option<LostReason>>,
}

impl LeaseGuard {
    pub(crate) fn new(valid_until: Instant) -> Self {
        let origin = Instant::now();
        let guard = Self {
            inner: Arc::new(GuardState {
                origin,
                valid_until_nanos: AtomicU64::new(0),
                lost: CancellationToken::new(),
                reason: Mutex::new(None),
            }),
        };
        guard.extend_to(valid_until);
        guard
    }

    /// A guard that never expires by time; used when there is no lock
    /// (database-only mode, dry runs, tests of the database backstop).
    pub fn unbounded() -> Self {
        let guard = Self::new(Instant::now());
        guard
            .inner
            .valid_until_nanos
            .store(u64::MAX, Ordering::SeqCst);
        guard
    }

    pub(crate) fn extend_to(&self, valid_until: Instant) {
        let nanos = valid_until
            .saturating_duration_since(self.inner.origin)
            .as_nanos()
            .min(u128::from(u64::MAX - 1)) as u64;
        self.inner.valid_until_nanos.store(nanos, Ordering::SeqCst);
    }

    /// The local instant after which the lease is no longer trusted.
    pub fn valid_until(&self) -> Option<Instant> {
        match self.inner.valid_until_nanos.load(Ordering::SeqCst) {
            u64::MAX => None,
            nanos => Some(self.inner.origin + Duration::from_nanos(nanos)),
        }
    }

    /// Ok while the lease can be trusted. Call before every mail.
    pub fn check(&self) -> Result<(), LostReason> {
        if let Some(reason) = self.lost_reason() {
            return Err(reason);
        }
        match self.valid_until() {
            Some(deadline) if Instant::now() >= deadline => {
                self.lose(LostReason::Expired);
                Err(self.lost_reason().unwrap_or(LostReason::Expired))
            }
            _ => Ok(()),
        }
    }

    pub fn lost_reason(&self) -> Option<LostReason> {
        *self.inner.reason.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the lease lost; the first reason wins.
    pub fn lose(&self, reason: LostReason) {
        {
            let mut slot = self.inner.reason.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(reason);
            }
        }
        self.inner.lost.cancel();
    }

    /// Resolves when the lease is marked lost (for `select!`).
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.inner.lost.cancelled()
    }
}

/// Handle to the renewal task.
#[derive(Debug)]
pub(crate) struct Watchdog {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Watchdog {
    pub(crate) fn spawn(
        backend: LockBackend,
        handle: Handle,
        ttl: Duration,
        renew_every: Duration,
        acquired_at: Instant,
        guard: LeaseGuard,
    ) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(renew_until_stopped(
            backend,
            handle,
            ttl,
            renew_every,
            acquired_at,
            guard,
            stop.clone(),
        ));
        Self { stop, task }
    }

    /// Stops renewing and waits until no renewal can still be in flight.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        if let Err(e) = self.task.await
            && e.is_panic()
        {
            tracing::error!("lock watchdog panicked: {e}");
        }
    }

    pub(crate) fn abort(self) {
        self.stop.cancel();
        self.task.abort();
    }
}

/// Delay before retrying a renewal that failed with a backend error.
fn retry_delay(renew_every: Duration) -> Duration {
    (renew_every / 4).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

async fn renew_until_stopped(
    backend: LockBackend,
    handle: Handle,
    ttl: Duration,
    renew_every: Duration,
    acquired_at: Instant,
    guard: LeaseGuard,
    stop: CancellationToken,
) {
    let margin = safety_margin(ttl);
    let mut next = acquired_at + renew_every;
    let renewals = backend.times().renewals.clone();
    let count = |result: &'static str| {
        renewals
            .get_or_create(&crate::metrics::ResultLabel { result })
            .inc();
    };
    // Only the first failure of a streak is worth a warning.
    let mut failing = false;
    loop {
        let Some(deadline) = guard.valid_until() else {
            return;
        };
        // Never wait so long that a failed renewal has no time for a retry.
        let at = next.min(deadline.checked_sub(margin).unwrap_or(deadline));
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = guard.lost() => return,
            _ = sleep_until(deadline) => {
                count("expired");
                tracing::warn!(reason = %LostReason::Expired, "lock lost; cancelling the job");
                guard.lose(LostReason::Expired);
                return;
            }
            _ = sleep_until(at) => {}
        }

        let sent_at = Instant::now();
        let attempt = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            attempt = timeout_at(deadline, backend.renew(&handle)) => attempt,
        };
        match attempt {
            Ok(Ok(Renewal::Renewed)) => {
                count("renewed");
                if failing {
                    tracing::info!("lock renewal works again");
                    failing = false;
                }
                guard.extend_to(sent_at + ttl - margin);
                next = sent_at + renew_every;
                tracing::trace!("lock renewed");
            }
            Ok(Ok(found @ (Renewal::Gone | Renewal::Stolen))) => {
                let reason = if found == Renewal::Gone {
                    count("gone");
                    LostReason::Gone
                } else {
                    count("stolen");
                    LostReason::Stolen
                };
                tracing::warn!(%reason, "lock lost; cancelling the job");
                guard.lose(reason);
                return;
            }
            Ok(Err(error)) => {
                count("error");
                if !failing {
                    tracing::warn!(%error, "lock renewal failed; retrying until the lease lapses");
                    failing = true;
                } else {
                    tracing::debug!(%error, "lock renewal failed again");
                }
                next = Instant::now() + retry_delay(renew_every);
            }
            Err(_elapsed) => {
                count("expired");
                tracing::warn!(reason = %LostReason::Expired, "lock lost; cancelling the job");
                guard.lose(LostReason::Expired);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_guard_past_its_deadline_reports_expired() {
        let guard = LeaseGuard::new(Instant::now() + Duration::from_millis(20));
        assert!(guard.check().is_ok());
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(guard.check(), Err(LostReason::Expired));
        assert_eq!(guard.lost_reason(), Some(LostReason::Expired));
    }

    #[tokio::test]
    async fn the_first_loss_reason_wins() {
        let guard = LeaseGuard::unbounded();
        guard.lose(LostReason::Stolen);
        guard.lose(LostReason::Gone);
        assert_eq!(guard.check(), Err(LostReason::Stolen));
    }

    #[tokio::test]
    async fn an_unbounded_guard_never_expires() {
        let guard = LeaseGuard::unbounded();
        assert_eq!(guard.valid_until(), None);
        assert!(guard.check().is_ok());
    }

    #[test]
    fn retries_are_bounded() {
        assert_eq!(
            retry_delay(Duration::from_secs(10)),
            Duration::from_millis(250)
        );
        assert_eq!(
            retry_delay(Duration::from_millis(20)),
            Duration::from_millis(10)
        );
    }
}
