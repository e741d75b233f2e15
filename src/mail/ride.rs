//! Riding: a message waiting for a connection of the pool boards with its
//! envelope (MAIL, each RCPT, DATA); a send about to write its message's
//! end on a pipelining connection takes the first rider aboard and writes
//! the rider's envelope in the same write (RFC 2920 lets a group begin
//! with a message's content). Once the server answered its own message,
//! the send hands the connection over, its transaction slot with it, and
//! the rider reads its envelope's replies from it: one round trip a
//! message instead of two while letters queue for the pool.
//!
//! An envelope delivers nothing: a rider whose connection does not come
//! (the connection broke, or the send's message was refused and the
//! connection is not reused) gets a fresh one; a rider that is gone by
//! then (its send cancelled) costs the connection, closed, never a
//! message. The slot goes with the connection, or back to the pool.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use super::OutgoingMail;
use super::pool::{Pool, Pooled, Slot};
use super::replies::SendError;
use super::transaction::{Accepted, Turn, rider_envelope, transact};
use super::written::OnWritten;

/// What a rider gets: the connection its envelope went out on, or word
/// that it broke (or is not reused) and the rider needs another.
pub(super) enum Handoff {
    Ready(Box<Pooled>),
    Broken,
}

/// Riders waiting for a connection, in the order they boarded.
#[derive(Default)]
pub(super) struct Board {
    seats: Mutex<VecDeque<Seat>>,
    tickets: std::sync::atomic::AtomicU64,
}

struct Seat {
    ticket: u64,
    envelope: String,
    handoff: oneshot::Sender<(Handoff, Slot)>,
}

/// A rider's place on the board.
pub(super) struct Ticket(u64);

/// A rider taken aboard: its envelope goes out with the send's message.
pub(super) struct Aboard {
    handoff: oneshot::Sender<(Handoff, Slot)>,
}

impl Board {
    /// Boards a rider with its `envelope`; the connection (or word that it
    /// broke) comes on the receiver, with a transaction slot.
    pub fn board(&self, envelope: String) -> (Ticket, oneshot::Receiver<(Handoff, Slot)>) {
        let (handoff, received) = oneshot::channel();
        let ticket = self
            .tickets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut seats = self.seats();
        // Riders whose sends were cancelled while they waited.
        seats.retain(|s| !s.handoff.is_closed());
        seats.push_back(Seat {
            ticket,
            envelope,
            handoff,
        });
        (Ticket(ticket), received)
    }

    /// The rider leaves the board before any send took it aboard: true.
    /// False: a send has its envelope on the wire, and the handoff comes.
    pub fn alight(&self, ticket: Ticket) -> bool {
        let mut seats = self.seats();
        let before = seats.len();
        seats.retain(|s| s.ticket != ticket.0);
        seats.len() != before
    }

    /// The first rider still waiting, taken aboard: its envelope to write.
    pub fn take(&self) -> Option<(String, Aboard)> {
        let mut seats = self.seats();
        while let Some(seat) = seats.pop_front() {
            if !seat.handoff.is_closed() {
                let aboard = Aboard {
                    handoff: seat.handoff,
                };
                return Some((seat.envelope, aboard));
            }
        }
        None
    }

    fn seats(&self) -> std::sync::MutexGuard<'_, VecDeque<Seat>> {
        self.seats.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Aboard {
    /// Hands the rider its connection (None: broken or not reused, so it
    /// takes another) and the transaction slot. A rider gone by then
    /// leaves the connection closed (its envelope waits for a body that
    /// never comes) and the slot back in the pool (both dropped).
    pub fn hand_over(self, pooled: Option<Pooled>, slot: Slot) {
        let handoff = pooled.map_or(Handoff::Broken, |p| Handoff::Ready(Box::new(p)));
        drop(self.handoff.send((handoff, slot)));
    }
}

/// The pool and its board, as one send sees them.
pub(super) struct Seats<'a> {
    pub pool: &'a Pool,
    pub board: &'a Board,
    /// `smtp.timeout`, for each step of a transaction.
    pub limit: Duration,
}

impl Seats<'_> {
    /// A transaction slot, and the connection a send before us handed
    /// over with it (our envelope written on it, or word that it broke).
    /// While every slot is taken, a message whose envelope can ride waits
    /// on the board as well as for a slot, whichever comes first.
    pub async fn slot_for(
        &self,
        mail: &OutgoingMail,
    ) -> Result<(Slot, Option<Handoff>), SendError> {
        let (pool, board) = (self.pool, self.board);
        if let Some(slot) = pool.try_acquire() {
            return Ok((slot, None));
        }
        let acquire = || async { pool.acquire().await.map_err(|_| SendError::NotStarted) };
        let Some(envelope) = rider_envelope(mail) else {
            return Ok((acquire().await?, None));
        };
        let (ticket, mut handed) = board.board(envelope);
        tokio::select! {
            biased;
            got = &mut handed => match got {
                Ok((handoff, slot)) => Ok((slot, Some(handoff))),
                Err(_) => Ok((acquire().await?, None)),
            },
            slot = acquire() => {
                let slot = slot?;
                if board.alight(ticket) {
                    return Ok((slot, None));
                }
                // A send has our envelope on the wire: its connection
                // comes, with its slot.
                drop(slot);
                match handed.await {
                    Ok((handoff, slot)) => Ok((slot, Some(handoff))),
                    Err(_) => Ok((acquire().await?, None)),
                }
            }
        }
    }

    /// One transaction on `pooled` (`envelope_written`: by the send before
    /// us, after its message's end). The next message waiting on the board
    /// rides on this one's end and gets the connection and `slot` after
    /// it; otherwise the connection goes back to the pool if it can be
    /// reused (closed, no longer counted open, if not) and the slot comes
    /// back with the result.
    pub async fn transact(
        &self,
        mut pooled: Pooled,
        envelope_written: bool,
        slot: Option<Slot>,
        mail: &OutgoingMail,
        on_written: Option<OnWritten>,
    ) -> (Result<Accepted, SendError>, Option<Slot>) {
        let board = self.board;
        let mut aboard: Option<Aboard> = None;
        let (result, reusable) = {
            // Only a send that holds a slot has one to hand over.
            let mut next = || {
                let (envelope, rider) = board.take()?;
                aboard = Some(rider);
                Some(envelope)
            };
            let turn = Turn {
                pipelining: pooled.pipelining,
                envelope_written,
                next: match slot {
                    Some(_) => Some(&mut next as &mut (dyn FnMut() -> Option<String> + Send)),
                    None => None,
                },
            };
            transact(
                &mut pooled.conn,
                pooled.written.as_deref(),
                on_written,
                turn,
                mail,
                self.limit,
            )
            .await
        };
        match (aboard, slot) {
            (Some(rider), Some(slot)) => {
                rider.hand_over(reusable.then_some(pooled), slot);
                (result, None)
            }
            (_, slot) => {
                if reusable {
                    self.pool.put_idle(pooled);
                }
                (result, slot)
            }
        }
    }
}
