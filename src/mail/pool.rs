//! The SMTP pool's bookkeeping: how many connections are open, being set
//! up or idle, and how many transactions may run at once.
//!
//! The counts cannot drift: a connection counts as open exactly as long as
//! its [`Pooled`] value lives, and an attempt to connect counts as
//! connecting exactly as long as its [`Connecting`] guard lives, wherever
//! either is dropped (a broken transaction, a stale idle connection, a send
//! cancelled half-way). A successful attempt turns from connecting into
//! open in one step, so nobody ever sees "nothing open, nothing
//! connecting" while a connection is being handed over. Every change is
//! published on a watch channel, so a send can wait for a condition on the
//! counts without missing the change that makes it true.
//!
//! The capacity (permits in all) shrinks one permit at a time and is
//! restored under the same lock, so every permit [`Pool::use_fewer`]
//! forgot is added back exactly once by [`Pool::restore`], whatever sends
//! are running.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lettre::transport::smtp::client::AsyncSmtpConnection;
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Instant, timeout};

/// Idle pooled connections older than this are closed instead of reused.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// Connections by state, as last published.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Conns {
    /// Connections made and not closed (idle or in use).
    pub open: usize,
    /// Attempts to connect that have not ended yet.
    pub connecting: usize,
    /// Open connections waiting for the next message.
    pub idle: usize,
}

type Counts = Arc<watch::Sender<Conns>>;

/// A transaction slot: its permit goes back to the pool when dropped,
/// wherever that is (a send may hand it over with its connection).
pub(super) type Slot = OwnedSemaphorePermit;

pub(super) struct Pool {
    /// The size [`Pool::restore`] gives back: `smtp.pool_size`.
    full: std::sync::atomic::AtomicUsize,
    counts: Counts,
    /// One permit per transaction that may run at once: `full`, fewer after
    /// the server refused extra connections.
    slots: Arc<Semaphore>,
    /// How many permits `slots` holds in all now. Changed only together
    /// with the permits themselves, under this lock.
    capacity: Mutex<usize>,
    /// Connections that can take the next message, with when they got idle.
    idle: Mutex<Vec<(Pooled, Instant)>>,
}

/// An open connection; counted open until dropped.
pub(super) struct Pooled {
    pub conn: AsyncSmtpConnection,
    /// The server offered PIPELINING (RFC 2920) on this connection.
    pub pipelining: bool,
    /// Whether a message's end has left us on it (None: not watched, so
    /// every failure after a message began counts as after its end).
    pub written: Option<Arc<super::written::Written>>,
    _open: Open,
}

struct Open(Counts);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.send_modify(|c| c.open = c.open.saturating_sub(1));
    }
}

/// An attempt to connect; counted connecting until dropped or turned into
/// a [`Pooled`] connection.
pub(super) struct Connecting {
    counts: Counts,
    opened: bool,
}

impl Connecting {
    /// The attempt succeeded: the connection counts open from the same
    /// instant it stops counting as connecting.
    pub fn opened(
        mut self,
        conn: AsyncSmtpConnection,
        pipelining: bool,
        written: Option<Arc<super::written::Written>>,
    ) -> Pooled {
        self.opened = true;
        self.counts.send_modify(|c| {
            c.connecting = c.connecting.saturating_sub(1);
            c.open = c.open.saturating_add(1);
        });
        Pooled {
            conn,
            pipelining,
            written,
            _open: Open(Arc::clone(&self.counts)),
        }
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        if !self.opened {
            self.counts
                .send_modify(|c| c.connecting = c.connecting.saturating_sub(1));
        }
    }
}

impl Pool {
    pub fn new(size: usize) -> Self {
        Self {
            full: std::sync::atomic::AtomicUsize::new(size),
            counts: Arc::new(watch::Sender::new(Conns::default())),
            slots: Arc::new(Semaphore::new(size)),
            capacity: Mutex::new(size),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Waits for a transaction slot.
    pub async fn acquire(&self) -> Result<Slot, AcquireError> {
        Arc::clone(&self.slots).acquire_owned().await
    }

    /// A transaction slot if one is free now.
    pub fn try_acquire(&self) -> Option<Slot> {
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// Counts an attempt to connect until the guard is dropped or opened.
    pub fn connecting(&self) -> Connecting {
        self.counts
            .send_modify(|c| c.connecting = c.connecting.saturating_add(1));
        Connecting {
            counts: Arc::clone(&self.counts),
            opened: false,
        }
    }

    /// The counts now.
    pub fn conns(&self) -> Conns {
        *self.counts.borrow()
    }

    /// Waits (at most `limit`) until `ready` holds for the counts, and
    /// returns them as they are then.
    pub async fn wait_until(&self, limit: Duration, ready: impl FnMut(&Conns) -> bool) -> Conns {
        let mut counts = self.counts.subscribe();
        let _ = timeout(limit, counts.wait_for(ready)).await;
        self.conns()
    }

    /// A connection fit for the next message, if one is idle, with how
    /// long it stood idle; stale or broken idle connections are closed on
    /// the way.
    pub fn take_idle(&self) -> Option<(Pooled, Duration)> {
        let mut idle = self.idle();
        let mut found = None;
        while let Some((pooled, since)) = idle.pop() {
            if fit(&pooled, since) {
                found = Some((pooled, since.elapsed()));
                break;
            }
        }
        self.publish_idle(&idle);
        found
    }

    pub fn put_idle(&self, pooled: Pooled) {
        let mut idle = self.idle();
        idle.push((pooled, Instant::now()));
        self.publish_idle(&idle);
    }

    /// Closes idle connections that are stale or known to be broken, so the
    /// open count holds only connections that may still work.
    pub fn prune_idle(&self) {
        let mut idle = self.idle();
        idle.retain(|(pooled, since)| fit(pooled, *since));
        self.publish_idle(&idle);
    }

    /// Every idle connection, taken out of the pool.
    pub fn drain_idle(&self) -> Vec<Pooled> {
        let mut idle = self.idle();
        let drained = idle.drain(..).map(|(pooled, _)| pooled).collect();
        self.publish_idle(&idle);
        drained
    }

    /// The server refused one more connection: one permit fewer (keeping
    /// at least one), `slot` being the one given up. Returns the new
    /// capacity when it shrank.
    pub fn use_fewer(&self, slot: Slot) -> Option<usize> {
        let mut capacity = self.capacity();
        if *capacity <= 1 {
            return None;
        }
        slot.forget();
        *capacity = capacity.saturating_sub(1);
        Some(*capacity)
    }

    /// Gives back every permit `use_fewer` took. Returns how many.
    pub fn restore(&self) -> usize {
        let mut capacity = self.capacity();
        let full = self.full.load(std::sync::atomic::Ordering::SeqCst);
        let missing = full.saturating_sub(*capacity);
        if missing > 0 {
            self.slots.add_permits(missing);
            *capacity = full;
        }
        missing
    }

    fn publish_idle(&self, idle: &[(Pooled, Instant)]) {
        let n = idle.len();
        self.counts.send_if_modified(|c| {
            let changed = c.idle != n;
            c.idle = n;
            changed
        });
    }

    /// The idle list; a panic elsewhere while it was held leaves it usable.
    fn idle(&self) -> MutexGuard<'_, Vec<(Pooled, Instant)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn capacity(&self) -> MutexGuard<'_, usize> {
        self.capacity.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn fit(pooled: &Pooled, since: Instant) -> bool {
    since.elapsed() < IDLE_LIMIT && !pooled.conn.has_broken()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_permit_given_up_comes_back_once_when_the_pool_is_restored() {
        let pool = Pool::new(8);
        for _ in 0..5 {
            let slot = pool.acquire().await.unwrap();
            assert!(pool.use_fewer(slot).is_some());
        }
        assert_eq!(pool.slots.available_permits(), 3);

        assert_eq!(pool.restore(), 5);
        assert_eq!(pool.restore(), 0);
        assert_eq!(pool.slots.available_permits(), 8);
    }

    #[tokio::test]
    async fn the_pool_never_shrinks_below_one_slot() {
        let pool = Pool::new(2);
        let slot = pool.acquire().await.unwrap();
        assert_eq!(pool.use_fewer(slot), Some(1));
        let slot = pool.acquire().await.unwrap();
        assert_eq!(pool.use_fewer(slot), None);

        assert_eq!(pool.slots.available_permits(), 1);
    }

    #[tokio::test]
    async fn a_restore_while_sends_hold_slots_adds_back_only_what_was_given_up() {
        let pool = Pool::new(4);
        let held = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
        let slot = pool.acquire().await.unwrap();
        pool.use_fewer(slot);

        assert_eq!(pool.restore(), 1);
        drop(held);
        assert_eq!(pool.slots.available_permits(), 4);
    }

    #[tokio::test]
    async fn an_attempt_to_connect_counts_until_it_ends_however_it_ends() {
        let pool = Pool::new(2);
        let first = pool.connecting();
        let cancelled = tokio::spawn({
            let second = pool.connecting();
            async move {
                let _second = second;
                std::future::pending::<()>().await;
            }
        });
        assert_eq!(pool.conns().connecting, 2);

        drop(first);
        cancelled.abort();
        let settled = pool
            .wait_until(Duration::from_secs(5), |c| c.connecting == 0)
            .await;

        assert_eq!(settled, Conns::default());
    }
}
