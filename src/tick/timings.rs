//! Where a tick's time went ([`Waits`], in the run summary, the "tick
//! finished" line and `invoice_reminder_send_wait_seconds_total`): what
//! the senders waited on, and how long the phases' statements took.
//! Timings only describe; they decide nothing.
//!
//! A sender waits in one of two ways. With a send slot free and no letter
//! to take, it waits on whatever the marker is doing then: a mark's
//! statement (`marks`), writing results (`results`), or waiting for the
//! claimer's next letters (`claims`). With a letter in hand it waits for
//! the pacer's slot (`pacer`), a connection of the pool (`pool`) and the
//! relay's replies (`relay`); those are summed over the letters, so with
//! several in flight they add up to more than the tick's duration. The
//! other side of it: how long the pool's connections stood idle between
//! two messages (`idle_connections`, summed over connections), time the
//! relay could have been taking mail while no letter was ready for it.
//! And the phases' own side: their statements, and their waits for room
//! (the claimer in the claim bound; the marker, its next mark written, in
//! the in-flight limit, time in which the letters in flight held the tick
//! back, not the marker).

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::domain::Waits;

/// One kind of time spent.
#[derive(Debug, Clone, Copy)]
pub(super) enum Spent {
    /// The claimer waited for room in the claim bound.
    ClaimWaitingForRoom,
    /// The claimer read pages and ran claim statements.
    ClaimStatements,
    /// The marker ran mark statements (with the results they carried).
    MarkStatements,
    /// The marker's next mark, written, waited for room in the in-flight
    /// limit.
    MarkWaitingForRoom,
    /// The marker wrote results without a mark.
    RecordStatements,
    /// Senders with a free slot waited while a mark was written.
    WaitingOnMarks,
    /// Senders with a free slot waited while results were written.
    WaitingOnResults,
    /// Senders with a free slot waited for claimed letters.
    WaitingOnClaims,
    /// Letters waited for the pacer's slot.
    WaitingOnPacer,
    /// Letters waited for a connection of the pool.
    WaitingOnPool,
    /// Letters waited for the relay's replies.
    WaitingOnRelay,
    /// Connections of the pool stood idle between two messages.
    ConnectionsIdle,
}

const KINDS: usize = 12;

/// What the marker is doing, which an idle sender waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum MarkerWork {
    /// Waiting for claimed letters (or for room in the in-flight limit).
    Waiting = 0,
    /// Writing a mark (with the results it carries), ahead of its room,
    /// or committing it.
    Marking = 1,
    /// Writing results without a mark.
    Recording = 2,
}

/// Accumulated times, one per [`Spent`], from when the tick began.
#[derive(Debug)]
pub(super) struct Timings {
    nanos: [AtomicU64; KINDS],
    marker: AtomicU8,
    began: Instant,
}

impl Timings {
    /// Times of a tick that began at `began`.
    pub fn since(began: Instant) -> Self {
        Self {
            nanos: Default::default(),
            marker: AtomicU8::default(),
            began,
        }
    }

    pub fn add(&self, spent: Spent, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        if let Some(slot) = self.nanos.get(spent as usize) {
            slot.fetch_add(nanos, Ordering::Relaxed);
        }
    }

    /// A wait that began at `since` (if it did) has ended: its time goes
    /// to `spent`, and `since` is cleared.
    pub fn end(&self, spent: Spent, since: &mut Option<Instant>) {
        if let Some(since) = since.take() {
            self.add(spent, since.elapsed());
        }
    }

    /// Runs `work`, adding its time to `spent`.
    pub async fn time<T>(&self, spent: Spent, work: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = work.await;
        self.add(spent, started.elapsed());
        out
    }

    /// The marker now does `what`.
    pub fn marker(&self, what: MarkerWork) {
        self.marker.store(what as u8, Ordering::Relaxed);
    }

    /// Idle senders waited `took`, since the marker was doing what it
    /// did when the wait began (`then`).
    pub fn senders_idle(&self, then: MarkerWork, took: Duration) {
        let spent = match then {
            MarkerWork::Marking => Spent::WaitingOnMarks,
            MarkerWork::Recording => Spent::WaitingOnResults,
            MarkerWork::Waiting => Spent::WaitingOnClaims,
        };
        self.add(spent, took);
    }

    /// What the marker does now.
    pub fn marker_now(&self) -> MarkerWork {
        match self.marker.load(Ordering::Relaxed) {
            1 => MarkerWork::Marking,
            2 => MarkerWork::Recording,
            _ => MarkerWork::Waiting,
        }
    }

    fn ms(&self, spent: Spent) -> u64 {
        self.nanos
            .get(spent as usize)
            .map_or(0, |n| n.load(Ordering::Relaxed) / 1_000_000)
    }

    /// What the senders waited on.
    pub fn waits(&self) -> Waits {
        use Spent::*;
        Waits {
            marks: self.ms(WaitingOnMarks),
            results: self.ms(WaitingOnResults),
            claims: self.ms(WaitingOnClaims),
            pacer: self.ms(WaitingOnPacer),
            pool: self.ms(WaitingOnPool),
            relay: self.ms(WaitingOnRelay),
            idle_connections: self.ms(ConnectionsIdle),
            claim_statements: self.ms(ClaimStatements),
            claim_room: self.ms(ClaimWaitingForRoom),
            mark_statements: self.ms(MarkStatements),
            mark_room: self.ms(MarkWaitingForRoom),
            record_statements: self.ms(RecordStatements),
        }
    }
}

impl crate::mail::smtp::SendWaits for Timings {
    fn pacer(&self, took: Duration) {
        self.add(Spent::WaitingOnPacer, took);
    }
    fn pool(&self, took: Duration) {
        self.add(Spent::WaitingOnPool, took);
    }
    fn relay(&self, took: Duration) {
        self.add(Spent::WaitingOnRelay, took);
    }
    fn idle(&self, took: Duration) {
        // A connection kept from an earlier tick counts only this tick's
        // part of its idle time.
        self.add(Spent::ConnectionsIdle, took.min(self.began.elapsed()));
    }
}
