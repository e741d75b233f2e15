//! The mark phase: claimed letters (a letter is the rows of one mail) are
//! recorded as started (`started_at`), each row with the Message-ID its
//! mail carries, a group of letters at a time, ahead of the senders, and
//! only then handed to them (`handoff.rs`); each mark also writes the
//! results that finished since the last one (`record.rs`).
//!
//! At most [`InFlight::size`] letters (`send_concurrency`) are marked and
//! not yet written to a connection at any moment: that, plus the mail the
//! server took whose result was not yet written, is all a SIGKILL can
//! leave unknown. A mark is written ahead, in a transaction left open
//! ([`db::uncommitted::begin_progress`]), while the letters before it are
//! still being sent, and committed only once the limit has room for its
//! group ([`InFlight::group`]): a row is marked only from its commit on,
//! so the limit holds at every moment, and the senders wait for the
//! commit's round trip at most, never for the mark's statement (and a
//! commit with letters waiting for the next mark begins that mark's
//! transaction in the same round trip). A mark
//! that waits too long for room, or has to make way for results due on
//! their own, is rolled back and written again later.
//!
//! A row is sent only if this run's mark on it took effect, so a row that
//! another run handed back (this run's lease looked over) is never sent here.
//! Rows enter `Unsent` before their mark is sent and leave it as their mail
//! goes to the server: whatever ends the run, the end of the run returns
//! every row marked and never sent (`unsent.rs`). Rows never marked are
//! handed back at the end of the run too, or by a later run if this process
//! dies.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::TickError;
use super::bounds::{InFlight, Room, wait_for};
use super::handoff::{self, Committed, Marked};
use super::pipeline::{Pipeline, Stop};
use super::record::{Finished, RECORD_EVERY};
use super::timings::{MarkerWork, Spent};
use crate::db;
use crate::domain::{Attempted, Letter};

/// What the claimer hands the marker: letters to mark.
pub(super) type Batch = Vec<Letter>;

/// A mark written ahead and not yet committed: its letters, the results
/// it carries, and its open transaction.
struct Ahead {
    letters: Vec<Letter>,
    results: Vec<Attempted>,
    written: db::uncommitted::Uncommitted,
    /// When the mark read its rows' holds (just before its statement).
    checked_at: tokio::time::Instant,
    /// Rolled back if the limit has no room for it by then: an open
    /// transaction must end well within `idle_in_transaction_session_timeout`.
    expires: tokio::time::Instant,
}

/// The mark phase of one tick.
pub(super) struct Marker {
    p: Arc<Pipeline>,
    in_flight: InFlight,
    /// Claimed letters waiting for their mark.
    buffer: VecDeque<Letter>,
    /// The next mark, written and waiting for room to commit.
    ahead: Option<Ahead>,
    /// A transaction begun with the last mark's commit, for the next mark.
    begun: Option<db::uncommitted::Begun>,
    /// Results waiting to be written.
    finished: Finished,
}

impl Marker {
    pub fn new(p: Arc<Pipeline>, in_flight: InFlight) -> Self {
        let finished = Finished::new(p.ctx().settings.reminders.batch_size);
        Self {
            p,
            in_flight,
            buffer: VecDeque::new(),
            ahead: None,
            begun: None,
            finished,
        }
    }

    /// Marks claimed letters a group at a time and passes each marked one
    /// on, writing the results that finished with each mark, until the
    /// claimer is done, every row is marked or skipped, and every result
    /// is written (or kept for later).
    pub async fn run(
        mut self,
        mut claimed: mpsc::Receiver<Batch>,
        mut results: mpsc::Receiver<Vec<Attempted>>,
        to_send: mpsc::Sender<Marked>,
    ) -> Result<(), TickError> {
        let mut to_send = Some(to_send);
        let (mut claiming, mut sending) = (true, true);
        let mut arrived = Vec::new();
        // The wait for room and the timer live across the loop's turns: a
        // turn per result must not make a new waiter and a new timer each
        // time.
        let mut room: Option<Room> = None;
        // Since when the mark written ahead waits for room.
        let mut room_since = None;
        let p = Arc::clone(&self.p);
        let timer = tokio::time::sleep(RECORD_EVERY);
        tokio::pin!(timer);
        let mut timer_at = None;
        loop {
            if self.p.stop_reason().is_some() {
                self.roll_back().await;
                self.skip_buffered();
            }
            // Nothing more to mark: the senders finish what they have.
            if !claiming && self.buffer.is_empty() && self.ahead.is_none() {
                to_send = None;
            }
            if to_send.is_none() && !sending {
                self.roll_back().await;
                break;
            }
            // The next mark is written as soon as there are letters for it.
            if to_send.is_some() && self.ahead.is_none() && !self.buffer.is_empty() {
                // Every result that came in rides with it.
                while let Ok(letter) = results.try_recv() {
                    self.finished.add(letter);
                }
                self.write_ahead().await;
                continue;
            }
            let marking = self.ahead.is_some();
            match &self.ahead {
                None => {
                    room = None;
                    p.timings().end(Spent::MarkWaitingForRoom, &mut room_since);
                }
                Some(ahead) if room.is_none() => {
                    room = Some(Box::pin(self.in_flight.room(ahead.letters.len())));
                    room_since = Some(tokio::time::Instant::now());
                }
                Some(_) => {}
            }
            let deadline = match (self.finished.deadline(), &self.ahead) {
                (Some(at), Some(ahead)) => Some(at.min(ahead.expires)),
                (at, ahead) => at.or(ahead.as_ref().map(|a| a.expires)),
            };
            if deadline != timer_at {
                if let Some(at) = deadline {
                    timer.as_mut().reset(at);
                }
                timer_at = deadline;
            }
            tokio::select! {
                biased;
                batch = claimed.recv(), if claiming => match batch {
                    Some(batch) => self.buffer.extend(batch),
                    None => claiming = false,
                },
                permit = wait_for(&mut room) => {
                    room = None;
                    p.timings().end(Spent::MarkWaitingForRoom, &mut room_since);
                    match permit {
                        Ok(room) => self.commit(room, to_send.as_ref()).await,
                        Err(_) => {
                            self.roll_back().await;
                            self.skip_buffered();
                        }
                    }
                }
                got = results.recv_many(&mut arrived, usize::MAX), if sending => {
                    if got == 0 {
                        sending = false;
                    }
                    for letter in arrived.drain(..) {
                        self.finished.add(letter);
                    }
                    if self.finished.due() || (!marking && !sending) {
                        self.record().await;
                    }
                }
                () = &mut timer, if timer_at.is_some() => {
                    if self.ahead.as_ref().is_some_and(|a| a.expires <= tokio::time::Instant::now()) {
                        self.roll_back().await;
                    }
                    self.record().await;
                }
                () = self.p.stopped(), if marking => {}
            }
        }
        p.timings().end(Spent::MarkWaitingForRoom, &mut room_since);
        if !self.finished.is_empty() {
            self.record().await;
        }
        self.finished.outcome()
    }

    /// Writes the results waiting, without a mark; a mark written ahead
    /// makes way for them (rolled back, to be written again).
    async fn record(&mut self) {
        if self.finished.is_empty() {
            return;
        }
        self.roll_back().await;
        let results = self.finished.take(&self.p);
        if results.is_empty() {
            return;
        }
        let writing = db::deliveries::record_deliveries(
            &self.p.ctx().phases.marks,
            self.p.run_id(),
            self.p.ctx().settings.reminders.max_attempts,
            &results,
        );
        let timings = self.p.timings();
        timings.marker(MarkerWork::Recording);
        let written = timings.time(Spent::RecordStatements, writing).await;
        timings.marker(MarkerWork::Waiting);
        self.finished.written(&self.p, results, written);
    }

    /// Writes the next group's mark, with the results waiting, in a
    /// transaction left open until the limit has room for it.
    async fn write_ahead(&mut self) {
        // Waiting for claimed letters may have outlasted the lease.
        if self.p.stop_reason().is_some() {
            return self.skip_buffered();
        }
        let take = self.in_flight.group().min(self.buffer.len());
        let letters: Vec<Letter> = self.buffer.drain(..take).collect();
        let mut ids = Vec::new();
        let mut message_ids = Vec::new();
        for letter in &letters {
            for id in letter.ids() {
                ids.push(id);
                message_ids.push(letter.message_id.clone());
            }
        }
        // Before the statement: a mark whose commit's reply is lost may
        // have taken.
        self.p.unsent().add(&letters);
        let results = self.finished.take(&self.p);
        let marks = db::deliveries::Marks {
            ids: &ids,
            message_ids: &message_ids,
        };
        let marks_db = &self.p.ctx().phases.marks;
        let writing = db::uncommitted::begin_progress(
            marks_db,
            self.begun.take(),
            self.p.run_id(),
            self.p.ctx().settings.reminders.max_attempts,
            marks,
            &results,
        );
        let checked_at = tokio::time::Instant::now();
        let timings = self.p.timings();
        timings.marker(MarkerWork::Marking);
        let written = timings.time(Spent::MarkStatements, writing).await;
        timings.marker(MarkerWork::Waiting);
        match written {
            Ok(written) => {
                let expires = tokio::time::Instant::now() + marks_db.deadline() / 2;
                self.ahead = Some(Ahead {
                    letters,
                    results,
                    written,
                    checked_at,
                    expires,
                });
            }
            Err(e) => self.failed(e, results, ids.len()),
        }
    }

    /// The mark written ahead, if any, is rolled back: its letters go back
    /// to the front of the buffer, its results back to those waiting.
    async fn roll_back(&mut self) {
        // The next transaction too: the marker's one connection goes back.
        self.begun = None;
        let Some(ahead) = self.ahead.take() else {
            return;
        };
        ahead.written.rollback().await;
        self.p
            .unsent()
            .forget(ahead.letters.iter().flat_map(|l| l.ids()));
        for letter in ahead.letters.into_iter().rev() {
            self.buffer.push_front(letter);
        }
        self.finished.add(ahead.results);
    }

    /// A mark's statement or commit failed: no more mail this tick. The
    /// mark may have committed with its reply lost: its rows were never
    /// sent, so the end of the run returns them.
    fn failed(&mut self, e: sqlx::Error, results: Vec<Attempted>, rows: usize) {
        if self.p.stop(Stop::RecordFailed) {
            tracing::error!(error = %e, "rows cannot be marked started; no more mail is started this tick");
        }
        self.finished.written(&self.p, results, Err(e));
        self.p.bound().release(rows);
    }

    /// The limit has room for the mark written ahead: it is committed, one
    /// letter per permit, and its rows are passed on.
    async fn commit(&mut self, room: OwnedSemaphorePermit, to_send: Option<&mpsc::Sender<Marked>>) {
        let Some(ahead) = self.ahead.take() else {
            return;
        };
        // Waiting for room may have outlasted the lease.
        if self.p.stop_reason().is_some() {
            self.ahead = Some(ahead);
            self.roll_back().await;
            return self.skip_buffered();
        }
        let Ahead {
            letters,
            results,
            written,
            checked_at,
            ..
        } = ahead;
        let permits = self.in_flight.take(room, letters.len());
        let timings = self.p.timings();
        timings.marker(MarkerWork::Marking);
        // With letters waiting for the next mark, its BEGIN goes with this
        // COMMIT: a round trip fewer on the marker's turn.
        let committing = written.commit(to_send.is_some() && !self.buffer.is_empty());
        let committed = timings.time(Spent::MarkStatements, committing).await;
        timings.marker(MarkerWork::Waiting);
        let committed = match committed {
            Ok((progress, begun)) => {
                self.begun = begun;
                self.finished
                    .written(&self.p, results, Ok(progress.recorded));
                Committed {
                    marked: progress.marked.into_iter().collect(),
                    held: progress.held.into_iter().collect(),
                    checked_at,
                }
            }
            Err(e) => {
                let rows = letters.iter().map(|l| l.rows.len()).sum();
                return self.failed(e, results, rows);
            }
        };
        let letters = letters.into_iter().zip(permits);
        handoff::hand_over(&self.p, letters, &committed, to_send).await;
    }

    /// The tick stopped: buffered rows are never marked; the end of the run
    /// returns them.
    fn skip_buffered(&mut self) {
        let n = self.buffer.iter().map(|l| l.rows.len()).sum();
        self.buffer.clear();
        self.p.bound().release(n);
    }
}
