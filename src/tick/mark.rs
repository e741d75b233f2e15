//! The mark phase: claimed letters (a letter is the rows of one mail) are
//! recorded as started (`started_at`), each row with the Message-ID its
//! mail carries, a group of letters at a time, ahead of the senders, and
//! only then handed to them.
//!
//! A mark is its own statement and commit, but it is not on the send path:
//! while one group is being sent the next is marked, so a send never waits
//! for a round trip or a WAL flush. At most [`MarkWindow::size`] letters
//! (`send_concurrency`) are marked and not finished at any moment: that,
//! plus the mail the server took whose result was not yet written, is all a
//! SIGKILL can leave unknown. A mark is taken once the window has room for
//! a group ([`MarkWindow::group`]: half the window), so marks cost one
//! commit per group.
//!
//! A row is sent only if this run's mark on it took effect, so a row that
//! another run handed back (this run's lease looked over) is never sent here.
//! Rows enter `Unsent` before their mark is sent and leave it as their mail
//! goes to the server: whatever ends the run, the end of the run returns
//! every row marked and never sent (`unsent.rs`). Rows never marked are
//! handed back at the end of the run too, or by a later run if this process
//! dies.

use std::sync::Arc;

use std::collections::{HashSet, VecDeque};

use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::bounds::MarkWindow;
use super::pipeline::{Pipeline, Stop};
use super::timings::Spent;
use crate::db;
use crate::domain::{Counts, Letter, ReminderId, count_of};

/// A letter whose rows are marked started, with its place in the mark
/// window (released when its send ends).
pub(super) struct Marked {
    pub letter: Letter,
    pub permit: OwnedSemaphorePermit,
}

/// What the claimer hands the marker: letters to mark.
pub(super) type Batch = Vec<Letter>;

/// The mark phase of one tick.
pub(super) struct Marker {
    p: Arc<Pipeline>,
    window: MarkWindow,
    /// Claimed letters waiting for room in the window.
    buffer: VecDeque<Letter>,
}

impl Marker {
    pub fn new(p: Arc<Pipeline>, window: MarkWindow) -> Self {
        Self {
            p,
            window,
            buffer: VecDeque::new(),
        }
    }

    /// Marks claimed letters a group at a time and passes each marked one
    /// on, until the claimer is done and every row is marked or skipped.
    pub async fn run(mut self, mut claimed: mpsc::Receiver<Batch>, to_send: mpsc::Sender<Marked>) {
        loop {
            if self.buffer.is_empty() {
                let waiting = claimed.recv();
                match self
                    .p
                    .timings()
                    .time(Spent::MarkWaitingForRows, waiting)
                    .await
                {
                    Some(batch) => self.buffer.extend(batch),
                    None => return,
                }
                if self.buffer.is_empty() {
                    continue;
                }
            }
            // A group takes what has already arrived, never waits for more.
            while self.buffer.len() < self.window.group()
                && let Ok(batch) = claimed.try_recv()
            {
                self.buffer.extend(batch);
            }
            self.mark_group(&to_send).await;
        }
    }

    /// Marks the next group (waiting for room in the window) and passes its
    /// rows on; or, once the tick has stopped, lets go of every buffered row.
    async fn mark_group(&mut self, to_send: &mpsc::Sender<Marked>) {
        if self.p.stop_reason().is_some() {
            return self.skip_buffered();
        }
        let n = self.buffer.len().min(self.window.group());
        let opening = self.window.open(n, self.buffer.len());
        let Some(permits) = self
            .p
            .timings()
            .time(Spent::MarkWaitingForRoom, opening)
            .await
        else {
            return self.skip_buffered();
        };
        // Waiting for room may have outlasted the lease.
        if self.p.stop_reason().is_some() {
            return self.skip_buffered();
        }
        let take = permits.len().min(self.buffer.len());
        let letters: Vec<Letter> = self.buffer.drain(..take).collect();
        let mut ids = Vec::new();
        let mut message_ids = Vec::new();
        for letter in &letters {
            for id in letter.ids() {
                ids.push(id);
                message_ids.push(letter.message_id.clone());
            }
        }
        // Before the statement: a mark whose reply is lost may have taken.
        self.p.unsent().add(&letters);
        let marking = db::deliveries::mark_started(
            &self.p.ctx().phases.marks,
            self.p.run_id(),
            &ids,
            &message_ids,
        );
        let marked = self.p.timings().time(Spent::MarkStatements, marking).await;
        let marked: HashSet<ReminderId> = match marked {
            Ok(marked) => marked.into_iter().collect(),
            Err(e) => {
                if self.p.stop(Stop::RecordFailed) {
                    tracing::error!(error = %e, "rows cannot be marked started; no more mail is started this tick");
                }
                // The mark may have committed with its reply lost: these rows
                // were never sent, so the end of the run returns them.
                self.p.bound().release(ids.len());
                return;
            }
        };
        let mut skipped = 0usize;
        for (mut letter, permit) in letters.into_iter().zip(permits) {
            // A row another run's sweep handed back is not ours to send.
            let before = letter.rows.len();
            let (mine, theirs): (Vec<_>, Vec<_>) = letter
                .rows
                .into_iter()
                .partition(|r| marked.contains(&r.id));
            self.p.unsent().forget(theirs.iter().map(|r| r.id));
            letter.rows = mine;
            skipped = skipped.saturating_add(before.saturating_sub(letter.rows.len()));
            if letter.rows.is_empty() {
                continue;
            }
            if let Err(unsent) = to_send.send(Marked { letter, permit }).await {
                // The senders are gone: handed back at the end of the run.
                self.p.not_sent(&unsent.0.letter);
            }
        }
        if skipped > 0 {
            self.p.add(&Counts {
                skipped: count_of(skipped),
                ..Counts::default()
            });
            self.p.bound().release(skipped);
        }
    }

    /// The tick stopped: buffered rows are never marked; the end of the run
    /// returns them.
    fn skip_buffered(&mut self) {
        let n = self.buffer.iter().map(|l| l.rows.len()).sum();
        self.buffer.clear();
        self.p.bound().release(n);
    }
}
