//! The open connections of one listener, and which one gives way at the
//! cap: the connection that has waited longest for a request (its first,
//! or its next on a kept-alive connection), once it has waited at least
//! [`STALLED`]. A connection whose request is being answered (a webhook
//! body being read included) never gives way, and neither does one that
//! was accepted a moment ago and is about to be read: when no connection
//! has stalled, the newcomer waits for a slot instead (see
//! [`Admission::Wait`]), so a burst of fresh connections is served in the
//! order it came, and a prober's connection is never dropped for being
//! among the newest.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

/// How long a connection must have waited for a request before a new one
/// may take its place.
pub(super) const STALLED: Duration = Duration::from_millis(500);

pub(super) struct Slots {
    cap: usize,
    open: Mutex<Open>,
    /// Woken when a connection closes.
    freed: Notify,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    by_age: BTreeMap<u64, Entry>,
}

struct Entry {
    /// Tells the connection to close (dropped: replaced).
    replace: Option<oneshot::Sender<()>>,
    /// Resolves when the connection's socket is closed.
    closed: Option<oneshot::Receiver<()>>,
    /// Requests being answered now.
    busy: usize,
    /// Since when it has waited for a request (None while busy).
    waiting_since: Option<Instant>,
}

pub(super) enum Admission {
    Free(Slot),
    /// Admitted in the place of the connection that stalled longest;
    /// resolves when that one's socket is closed.
    Replacing(Slot, oneshot::Receiver<()>),
    /// Full, and nothing has stalled: try again when a connection closes
    /// or at this instant (when the oldest waiting one will have stalled;
    /// None: every one is being answered).
    Wait(Option<Instant>),
}

impl Slots {
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap: cap.max(1),
            open: Mutex::new(Open::default()),
            freed: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection accepted now.
    pub(super) fn admit(self: &Arc<Self>) -> Admission {
        let now = Instant::now();
        let mut open = self.lock();
        let mut replacing = None;
        if open.by_age.len() >= self.cap {
            let oldest = open
                .by_age
                .iter()
                .filter_map(|(id, e)| e.waiting_since.map(|since| (since, *id)))
                .min();
            match oldest {
                Some((since, id)) if now.saturating_duration_since(since) >= STALLED => {
                    replacing = open.by_age.remove(&id).and_then(|mut e| {
                        // Dropping the sender tells the connection to close.
                        e.replace = None;
                        e.closed
                    });
                }
                Some((since, _)) => return Admission::Wait(Some(since + STALLED)),
                None => return Admission::Wait(None),
            }
        }
        let id = open.next_id;
        open.next_id = open.next_id.wrapping_add(1);
        let (replace_tx, replace_rx) = oneshot::channel();
        let (closed_tx, closed_rx) = oneshot::channel();
        open.by_age.insert(
            id,
            Entry {
                replace: Some(replace_tx),
                closed: Some(closed_rx),
                busy: 0,
                waiting_since: Some(now),
            },
        );
        drop(open);
        let slot = Slot {
            id,
            slots: self.clone(),
            replaced: Some(replace_rx),
            _closed: closed_tx,
        };
        match replacing {
            Some(closed) => Admission::Replacing(slot, closed),
            None => Admission::Free(slot),
        }
    }

    /// Resolves when a connection closes (registered before the caller
    /// looks again, so no close is missed).
    pub(super) fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    fn set_busy(&self, id: u64, more: bool) {
        if let Some(entry) = self.lock().by_age.get_mut(&id) {
            entry.busy = if more {
                entry.busy.saturating_add(1)
            } else {
                entry.busy.saturating_sub(1)
            };
            entry.waiting_since = (entry.busy == 0).then(Instant::now);
        }
    }
}

/// A connection's place among the open ones; given back when dropped.
pub(super) struct Slot {
    id: u64,
    slots: Arc<Slots>,
    /// Resolves (with an error) when the connection is replaced.
    replaced: Option<oneshot::Receiver<()>>,
    /// Dropped with the slot: tells a replacing connection this one is
    /// closed.
    _closed: oneshot::Sender<()>,
}

impl Slot {
    /// Resolves when this connection is replaced; never otherwise.
    pub(super) fn replaced(&mut self) -> impl Future<Output = ()> + use<> {
        let receiver = self.replaced.take();
        async move {
            match receiver {
                Some(receiver) => {
                    let _ = receiver.await;
                }
                None => std::future::pending().await,
            }
        }
    }

    pub(super) fn busy_handle(&self) -> BusyHandle {
        BusyHandle {
            id: self.id,
            slots: self.slots.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().by_age.remove(&self.id);
        self.slots.freed.notify_waiters();
    }
}

/// Marks requests of one connection as being answered.
#[derive(Clone)]
pub(super) struct BusyHandle {
    id: u64,
    slots: Arc<Slots>,
}

impl BusyHandle {
    pub(super) fn enter(&self) -> BusyGuard {
        self.slots.set_busy(self.id, true);
        BusyGuard(self.clone())
    }
}

/// A request being answered; the connection waits again when dropped.
pub(super) struct BusyGuard(BusyHandle);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.slots.set_busy(self.0.id, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(slots: &Arc<Slots>) -> Slot {
        match slots.admit() {
            Admission::Free(slot) => slot,
            _ => panic!("a free slot expected"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_only_a_stalled_connection_gives_way_and_never_a_busy_one() {
        let slots = Slots::new(2);
        let first = free(&slots);
        let second = free(&slots);
        let answering = first.busy_handle().enter();

        // Nothing has stalled yet: the newcomer waits.
        let Admission::Wait(Some(at)) = slots.admit() else {
            panic!("a wait until the second has stalled")
        };
        tokio::time::advance(STALLED).await;
        assert!(Instant::now() >= at);
        let Admission::Replacing(third, _) = slots.admit() else {
            panic!("the second (stalled) gives way")
        };
        assert!(slots.lock().by_age.contains_key(&first.id));
        assert!(!slots.lock().by_age.contains_key(&second.id));

        // Both busy: wait for a close, however long.
        let _also = third.busy_handle().enter();
        tokio::time::advance(STALLED * 10).await;
        assert!(matches!(slots.admit(), Admission::Wait(None)));
        drop(answering);
        drop(first);
        assert!(matches!(slots.admit(), Admission::Free(_)));
    }
}
