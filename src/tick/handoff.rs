//! The letters of a committed mark, handed to the senders: each keeps
//! only its rows the mark took effect on ([`Committed::marked`]); a row
//! held since its claim ([`Committed::held`]) stays unstarted, for the end
//! of the run to hand back unattempted, and a row another run's sweep
//! handed back is never sent here. A letter the senders can no longer
//! take is handed back at the end of the run. Each letter carries its
//! place in the in-flight limit until its send ends.

use std::collections::HashSet;

use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::pipeline::Pipeline;
use crate::domain::{Counts, Letter, ReminderId, count_of};

/// A letter whose rows are marked started, with its place in the
/// in-flight limit (released when its send ends).
pub(super) struct Marked {
    pub letter: Letter,
    pub permit: OwnedSemaphorePermit,
    /// When the mark read its rows' holds (just before its statement).
    pub checked_at: tokio::time::Instant,
}

/// What a mark's commit said of its rows.
pub(super) struct Committed {
    /// The rows it marked started.
    pub marked: HashSet<ReminderId>,
    /// The rows it found held (a payment hold or a pause) and left alone.
    pub held: HashSet<ReminderId>,
    /// When the mark read its rows' holds (just before its statement).
    pub checked_at: tokio::time::Instant,
}

/// Hands each of the mark's letters, with its place in the limit, to the
/// senders (`to_send`), with only the rows the mark took effect on.
pub(super) async fn hand_over(
    p: &Pipeline,
    letters: impl Iterator<Item = (Letter, OwnedSemaphorePermit)>,
    committed: &Committed,
    to_send: Option<&mpsc::Sender<Marked>>,
) {
    let (mut skipped, mut withheld) = (0usize, 0usize);
    for (mut letter, permit) in letters {
        let before = letter.rows.len();
        let (rows, stopped): (Vec<_>, Vec<_>) = letter
            .rows
            .into_iter()
            .partition(|r| !committed.held.contains(&r.id));
        let (mine, theirs): (Vec<_>, Vec<_>) = rows
            .into_iter()
            .partition(|r| committed.marked.contains(&r.id));
        p.unsent().forget(theirs.iter().map(|r| r.id));
        letter.rows = mine;
        withheld = withheld.saturating_add(stopped.len());
        skipped = skipped.saturating_add(
            before
                .saturating_sub(letter.rows.len())
                .saturating_sub(stopped.len()),
        );
        if letter.rows.is_empty() {
            continue;
        }
        let sent = match to_send {
            Some(to_send) => to_send
                .send(Marked {
                    letter,
                    permit,
                    checked_at: committed.checked_at,
                })
                .await
                .map_err(|e| e.0.letter),
            None => Err(letter),
        };
        if let Err(unsent) = sent {
            // The senders are gone: handed back at the end of the run.
            p.not_sent(&unsent);
        }
    }
    if skipped > 0 || withheld > 0 {
        p.add(&Counts {
            skipped: count_of(skipped),
            withheld: count_of(withheld),
            ..Counts::default()
        });
        p.bound().release(skipped.saturating_add(withheld));
    }
}
