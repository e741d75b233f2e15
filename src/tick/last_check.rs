//! The last moment decides: a letter's rows are checked for a console
//! pause or a payment hold, and its customer's own send window for its
//! close, once a connection is the letter's own, just before its message
//! goes to the relay ([`LastCheck`], the mailer's `Gate`).
//!
//! The mark already read the holds (`owing::not_withheld!`), so a letter
//! sent right after its mark needs no second read. One that waited (for
//! the pacer's slot, for a connection, behind a slow relay) longer than
//! [`FRESH_FOR`] since its rows were last read reads them again: a
//! payment signal answered while the letter waited stops it. At full
//! speed no letter waits that long, so the check costs nothing there; a
//! paced tick reads one small statement per letter at most, at the
//! relay's pace, and letters that wait at once share one ([`HoldChecks`]:
//! one read at a time, each covering every letter that asked before it
//! began). Rows found held are handed back unattempted; the rest of a
//! statement goes without them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::pipeline::{Pipeline, Stop};
use crate::domain::{ReminderId, SendWindow};
use crate::mail::smtp::Gate;

/// How long a read of the holds stands for a letter about to go.
pub(super) const FRESH_FOR: Duration = Duration::from_millis(250);

/// The gate of one letter.
pub(super) struct LastCheck<'a> {
    p: &'a Pipeline,
    ids: Vec<ReminderId>,
    /// When its rows' holds were last read (first: by the mark).
    checked_at: Mutex<Instant>,
    /// The rows found held, once a check found any.
    held: Mutex<Vec<ReminderId>>,
    /// The customer's own send window, when it is theirs to close.
    window: Option<SendWindow>,
}

impl<'a> LastCheck<'a> {
    pub fn new(
        p: &'a Pipeline,
        ids: Vec<ReminderId>,
        checked_at: Instant,
        window: Option<SendWindow>,
    ) -> Self {
        Self {
            p,
            ids,
            checked_at: Mutex::new(checked_at),
            held: Mutex::default(),
            window,
        }
    }

    /// The rows found held (emptied).
    pub fn take_held(&self) -> Vec<ReminderId> {
        std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether no check found rows held.
    pub fn held_is_empty(&self) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// The letter goes on with `ids` only.
    pub fn keep(&mut self, ids: Vec<ReminderId>) {
        self.ids = ids;
    }

    fn checked_at(&self) -> std::sync::MutexGuard<'_, Instant> {
        self.checked_at.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn check(&self) -> bool {
        if self.p.stop_reason().is_some() {
            return false;
        }
        // The customer's window closed while the letter waited: it goes
        // back unattempted, for the window's next opening.
        if let Some(window) = &self.window
            && self.p.window_closed(window)
        {
            tracing::info!(
                timezone = window.timezone.name(),
                "the customer's send window closed before the mail went; handed back unattempted"
            );
            return false;
        }
        if self.checked_at().elapsed() < FRESH_FOR {
            return true;
        }
        let reading = Instant::now();
        match self
            .p
            .hold_checks()
            .held(&self.p.ctx().phases.checks, &self.ids)
            .await
        {
            Ok(held) if held.is_empty() => {
                *self.checked_at() = reading;
                self.p.stop_reason().is_none()
            }
            Ok(held) => {
                *self.held.lock().unwrap_or_else(|p| p.into_inner()) = held;
                false
            }
            Err(e) => {
                if self.p.stop(Stop::RecordFailed) {
                    tracing::error!(error = %e, "the payment holds and pauses cannot be read before a letter goes; no more mail is started this tick");
                }
                false
            }
        }
    }
}

impl Gate for LastCheck<'_> {
    fn may_start(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(self.check())
    }
}
