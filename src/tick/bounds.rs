//! The two bounds a tick keeps, each one small type with named operations,
//! so the rule can be read (and tested) in one place:
//!
//! * [`ClaimBound`]: at most `2 × batch_size` rows claimed and not yet
//!   recorded (plus the rows of the statements the in-flight limit may hold,
//!   when a letter holds several). The claimer [`reserves`](ClaimBound::reserve) room for a
//!   page before it claims, [`keeps`](Reservation::keep) what the claim
//!   took (the rest goes back at once), and each row's place is
//!   [`released`](ClaimBound::release) when its result is written or it
//!   will not be sent. This is what a SIGKILL can leave in `sending`.
//! * [`InFlight`]: at most `send_concurrency` letters marked started
//!   whose message has not been written to a connection yet (its final
//!   dot has not left us). The marker waits for
//!   [`room`](InFlight::room) for a group of letters (the limit less
//!   two per connection) before marking them, and
//!   [`takes`](InFlight::take) one permit per letter; a letter's permit
//!   is dropped once its message was written to a connection (or its
//!   send ended without that). This is what a SIGKILL can leave
//!   unknown besides the mail the server took but we never recorded.
//!
//! Neither can be inflated by a bookkeeping slip: a release never returns
//! more than is outstanding, and every count saturates.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};

use crate::config::ReminderSettings;

/// Rows claimed but not yet recorded: at most `2 × batch_size` (and the
/// rows of the in-flight limit's statements).
#[derive(Debug)]
pub(super) struct ClaimBound {
    permits: Semaphore,
    /// Rows kept by reservations and not yet released.
    outstanding: AtomicUsize,
    max: usize,
}

/// Room reserved for one claim; whatever it does not [`keep`](Self::keep)
/// goes back when it is dropped.
#[derive(Debug)]
pub(super) struct Reservation<'a> {
    bound: &'a ClaimBound,
    permit: SemaphorePermit<'a>,
}

impl ClaimBound {
    /// The bound a tick's settings give: `2 × batch_size` rows, and the
    /// rows of the letters the in-flight limit may hold (`send_concurrency`
    /// letters of at most `rows_per_letter` rows each: one per row in
    /// invoice mode, none counted twice). without them a limit of
    /// five-invoice statements took most of the rows, and the claimer
    /// waited for room (BENCHMARKS.md, "Where a customer-mode tick's time goes").
    pub fn for_settings(reminders: &ReminderSettings, rows_per_letter: usize) -> Self {
        let in_flight_rows = match rows_per_letter {
            0 | 1 => 0,
            n => reminders.send_concurrency.get().saturating_mul(n),
        };
        Self::new(reminders.batch_size, in_flight_rows)
    }

    /// `2 × batch_size` rows, and `in_flight_rows` more.
    pub fn new(batch_size: u32, in_flight_rows: usize) -> Self {
        let max = usize::try_from(batch_size)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
            .saturating_add(in_flight_rows)
            .clamp(1, Semaphore::MAX_PERMITS);
        Self {
            permits: Semaphore::new(max),
            outstanding: AtomicUsize::new(0),
            max,
        }
    }

    /// The bound: `2 × batch_size` (and the in-flight limit's statements'
    /// rows).
    pub fn max(&self) -> usize {
        self.max
    }

    /// Rows claimed and not yet released.
    #[cfg(test)]
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::SeqCst)
    }

    /// Waits until `n` more rows (at most the bound) may be claimed.
    pub async fn reserve(&self, n: usize) -> Option<Reservation<'_>> {
        let n = u32::try_from(n.min(self.max)).unwrap_or(u32::MAX);
        let permit = self.permits.acquire_many(n).await.ok()?;
        Some(Reservation {
            bound: self,
            permit,
        })
    }

    /// `n` rows are recorded (or will never be sent): their room is free.
    /// Never releases more than is outstanding.
    pub fn release(&self, n: usize) {
        let mut released = 0;
        let _ = self
            .outstanding
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                released = n.min(now);
                Some(now - released)
            });
        if released > 0 {
            self.permits.add_permits(released);
        }
    }
}

impl Reservation<'_> {
    /// How many rows the reservation holds room for.
    #[cfg(test)]
    pub fn size(&self) -> usize {
        self.permit.num_permits()
    }

    /// The claim took `used` rows: their room stays taken until released;
    /// the rest goes back now. Returns how many were kept (never more than
    /// reserved).
    pub fn keep(mut self, used: usize) -> usize {
        let kept = used.min(self.permit.num_permits());
        if let Some(part) = self.permit.split(kept) {
            part.forget();
            self.bound.outstanding.fetch_add(kept, Ordering::SeqCst);
            kept
        } else {
            0
        }
    }
}

/// Letters marked started whose end has not left us: at most
/// The letters a mark waits for room for, at most: 48 letters a mark is
/// 21 commits per 1,000, and a larger group only leaves fewer letters in
/// flight while it is written (the defaults, 64 and a pool of 8, mark 48).
pub(super) const MOST_PER_MARK: usize = 48;

/// `send_concurrency`.
#[derive(Debug, Clone)]
pub(super) struct InFlight {
    permits: Arc<Semaphore>,
    size: usize,
    group: usize,
}

impl InFlight {
    /// The limit is `send_concurrency` letters, so a SIGKILL leaves at
    /// most that many never-sent letters unknown.
    ///
    /// A group is the limit less two letters per connection
    /// (`2 × smtp.pool_size`): a mark is taken once that much room is
    /// free, and the letters still in the limit (one on each connection,
    /// one waiting for it) keep the connections busy while the mark's
    /// round trip and commit take place. Marks then cost one commit per
    /// group (BENCHMARKS.md, "The in-flight limit"). At least half the limit,
    /// so a limit not much larger than the pool still marks in two
    /// groups; at most [`MOST_PER_MARK`], so a larger limit keeps the rest
    /// of it in flight while a mark is written instead of waiting for room
    /// for a larger group; a group takes more letters when more room has
    /// freed by the time it is marked.
    pub fn new(send_concurrency: NonZeroUsize, pool_size: u32) -> Self {
        let size = send_concurrency.get().min(Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(size)),
            size,
            group: Self::group_for(send_concurrency, pool_size),
        }
    }

    /// The letters one mark takes once the limit has room for them, at
    /// `send_concurrency` and `smtp.pool_size`.
    pub fn group_for(send_concurrency: NonZeroUsize, pool_size: u32) -> usize {
        let size = send_concurrency.get().min(Semaphore::MAX_PERMITS);
        let busy = usize::try_from(pool_size)
            .unwrap_or(usize::MAX)
            .saturating_mul(2);
        size.saturating_sub(busy)
            .max(size / 2)
            .clamp(1, MOST_PER_MARK)
    }

    /// The most letters marked whose end has not left us.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The most rows one mark takes.
    pub fn group(&self) -> usize {
        self.group
    }

    /// Waits for room for `n` letters (at most a group): one permit for all
    /// of them, to hand to [`InFlight::take`]. An owned future, so a
    /// waiter can keep its place across other work.
    pub fn room(
        &self,
        n: usize,
    ) -> impl Future<Output = Result<OwnedSemaphorePermit, tokio::sync::AcquireError>> + Send + 'static
    {
        let n = n.clamp(1, self.group);
        Arc::clone(&self.permits).acquire_many_owned(u32::try_from(n).unwrap_or(1))
    }

    /// The room [`InFlight::room`] found, and whatever more is free (up
    /// to `wanted` letters in all), as one permit per letter; each is given
    /// back when it is dropped.
    pub fn take(&self, mut all: OwnedSemaphorePermit, wanted: usize) -> Vec<OwnedSemaphorePermit> {
        let more = wanted
            .saturating_sub(all.num_permits())
            .min(self.permits.available_permits());
        if more > 0
            && let Ok(extra) =
                Arc::clone(&self.permits).try_acquire_many_owned(u32::try_from(more).unwrap_or(0))
        {
            all.merge(extra);
        }
        let mut singles = Vec::with_capacity(all.num_permits());
        while all.num_permits() > 1 {
            match all.split(1) {
                Some(one) => singles.push(one),
                None => break,
            }
        }
        singles.push(all);
        singles
    }

    /// Waits for room for `n` letters, then takes up to `wanted` (see
    /// [`InFlight::room`] and [`InFlight::take`]).
    #[cfg(test)]
    pub async fn open(&self, n: usize, wanted: usize) -> Option<Vec<OwnedSemaphorePermit>> {
        let first = self.room(n).await.ok()?;
        Some(self.take(first, wanted))
    }

    /// Letters marked whose end has not left us, now.
    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        self.size.saturating_sub(self.permits.available_permits())
    }
}

/// A wait for room in the in-flight limit (see `InFlight::room`).
pub(super) type Room = std::pin::Pin<
    Box<dyn Future<Output = Result<OwnedSemaphorePermit, tokio::sync::AcquireError>> + Send>,
>;

/// The room, once the wait for it ends (never, without one).
pub(super) async fn wait_for(
    room: &mut Option<Room>,
) -> Result<OwnedSemaphorePermit, tokio::sync::AcquireError> {
    match room {
        Some(room) => room.await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(value: usize) -> NonZeroUsize {
        NonZeroUsize::new(value).unwrap_or(NonZeroUsize::MIN)
    }

    #[tokio::test]
    async fn a_claim_keeps_what_it_took_and_gives_back_the_rest() {
        let bound = ClaimBound::new(5, 0);
        assert_eq!(bound.max(), 10);
        let r = bound.reserve(5).await.unwrap_or_else(|| unreachable!());
        assert_eq!(r.size(), 5);
        assert_eq!(r.keep(3), 3);
        assert_eq!(bound.outstanding(), 3);
        // More rows than reserved (a source repeating keys) keeps only
        // what was reserved.
        let r = bound.reserve(2).await.unwrap_or_else(|| unreachable!());
        assert_eq!(r.keep(9), 2);
        assert_eq!(bound.outstanding(), 5);
        // A dropped reservation gives everything back.
        drop(bound.reserve(5).await);
        assert_eq!(bound.outstanding(), 5);
    }

    #[tokio::test]
    async fn releasing_more_than_is_outstanding_never_inflates_the_bound() {
        let bound = ClaimBound::new(2, 0);
        let r = bound.reserve(4).await.unwrap_or_else(|| unreachable!());
        r.keep(4);
        bound.release(100);
        assert_eq!(bound.outstanding(), 0);
        // The bound is still 4: a fifth row cannot be reserved.
        let r = bound.reserve(4).await.unwrap_or_else(|| unreachable!());
        assert_eq!(r.keep(4), 4);
        let fifth = tokio::time::timeout(std::time::Duration::from_millis(50), bound.reserve(1));
        assert!(fifth.await.is_err(), "a fifth row was let in");
    }

    #[test]
    fn a_mark_takes_the_limit_less_two_letters_per_connection_at_least_half_of_it_and_at_most_48() {
        assert_eq!(InFlight::group_for(n(64), 8), 48);
        assert_eq!(InFlight::group_for(n(128), 8), 48);
        assert_eq!(InFlight::group_for(n(256), 8), 48);
        assert_eq!(InFlight::group_for(n(64), 30), 32);
        assert_eq!(InFlight::group_for(n(16), 8), 8);
        assert_eq!(InFlight::group_for(n(1), 8), 1);
    }

    #[tokio::test]
    async fn the_in_flight_limit_hands_out_one_permit_per_row_up_to_its_size() {
        let limit = InFlight::new(n(32), 8);
        assert_eq!((limit.size(), limit.group()), (32, 16));
        let first = limit.open(16, 16).await.unwrap_or_default();
        assert_eq!(first.len(), 16, "a group");
        assert_eq!(limit.in_use(), 16);
        let second = limit.open(16, 20).await.unwrap_or_default();
        assert_eq!(second.len(), 16, "the second group in flight, and no more");
        assert_eq!(limit.in_use(), 32);
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), limit.open(1, 1));
        assert!(third.await.is_err(), "the limit let a 33rd row in");
        drop(first);
        drop(second);
        assert_eq!(limit.in_use(), 0);
    }
}
