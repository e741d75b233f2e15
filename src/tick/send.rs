//! The send phase: marked reminders are built and sent, `send_concurrency`
//! at a time over the SMTP pool. Each send holds its letter's place in the
//! in-flight limit until the end of its message has left us on a connection
//! (or the send ends without that): from then on its fate is the relay's,
//! and the place is free for the next mark. Its result goes to the
//! marker, which records it.
//!
//! A sent message's proof (the server's reply, the SHA-256 of its bytes,
//! and the bytes themselves with `archive.store = "database"`) goes with
//! its result.
//!
//! Before every mail the tick's stop reasons are checked (and again once a
//! connection is ours): a marked row that is not sent after all is returned
//! at the end of the run, like a row never started.

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use super::compose::Composer;
use super::handoff::Marked;
use super::last_check::LastCheck;
use super::pipeline::{Pipeline, Stop};
use crate::config::ArchiveStore;
use crate::db;
use crate::domain::{Attempted, Claimed, Counts, Delivery, Letter, count_of};
use crate::mail::{self, SendError};

/// The send phase of one tick.
pub(super) struct Sender {
    p: Arc<Pipeline>,
    composer: Composer,
}

impl Sender {
    pub fn new(p: Arc<Pipeline>) -> Self {
        Self {
            composer: Composer::new(Arc::clone(&p)),
            p,
        }
    }

    /// Sends marked rows until the marker is done; hands each result on.
    pub async fn run(self, marked: mpsc::Receiver<Marked>, results: mpsc::Sender<Vec<Attempted>>) {
        let concurrency = self.p.ctx().settings.reminders.send_concurrency.get();
        let p = Arc::clone(&self.p);
        let rows = TimedRows {
            marked,
            timings: p.timings(),
            waiting_since: None,
        };
        // Each send is a task of its own, so the runtime's threads share
        // them: a letter being composed never holds up another's reply,
        // nor a connection that came free (BENCHMARKS.md, "Each send a
        // task"). Dropping the stream aborts them, as it dropped the sends.
        let sender = Arc::new(self);
        let mut outcomes = rows
            .map(|m| {
                let sender = Arc::clone(&sender);
                AbortOnDropHandle::new(tokio::spawn(
                    async move { sender.attempt(m).await }.in_current_span(),
                ))
            })
            .buffer_unordered(concurrency);
        while let Some(ended) = outcomes.next().await {
            let attempt = match ended {
                Ok(attempt) => attempt,
                // A send that panicked ends the phase as it did inline.
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // Aborted: only while the tick itself is being dropped.
                Err(_) => None,
            };
            if let Some(attempted) = attempt
                && results.send(attempted).await.is_err()
            {
                break;
            }
        }
    }

    /// One marked letter: check we may still send, build, send (the pacer
    /// gives it its slot, and the last check its word), classify; one
    /// result per row, all the same. None: nothing was sent (returned at
    /// the end).
    async fn attempt(&self, marked: Marked) -> Option<Vec<Attempted>> {
        let Marked {
            mut letter,
            permit,
            checked_at,
        } = marked;
        // The letter's place in the in-flight limit: held until its end has
        // left us on a connection (or the attempt ends without that),
        // across sends the last check turns back.
        let window = Arc::new(std::sync::Mutex::new(Some(permit)));
        let invoice_id = letter.rows.first()?.invoice.id.clone();
        if let Some(stop) = self.p.stop_reason() {
            tracing::debug!(%invoice_id, ?stop, "not sending");
            return self.not_sent(&letter);
        }
        let own_window = letter
            .rows
            .first()
            .and_then(|r| self.p.window_of(&r.customer));
        let mut gate = LastCheck::new(&self.p, letter.ids().collect(), checked_at, own_window);
        loop {
            match self.send(&letter, &gate, &window).await {
                Sent::Done(attempted) => return attempted,
                Sent::Withheld => {
                    let held = gate.take_held();
                    let (stopped, rows): (Vec<_>, Vec<_>) =
                        letter.rows.into_iter().partition(|r| held.contains(&r.id));
                    letter.rows = stopped;
                    self.p.not_sent(&letter);
                    self.p.add(&Counts {
                        withheld: count_of(letter.rows.len()),
                        ..Counts::default()
                    });
                    tracing::info!(
                        %invoice_id,
                        rows = letter.rows.len(),
                        "a pause or a payment hold came while the letter waited; handed back unattempted"
                    );
                    letter.rows = rows;
                    if letter.rows.is_empty() {
                        return None;
                    }
                    // The rest of the statement goes without them.
                    self.p.unsent().handed_over(&letter);
                    gate.keep(letter.ids().collect());
                }
            }
        }
    }

    /// One send of `letter`: composed, handed to the mailer with its gate.
    async fn send(
        &self,
        letter: &Letter,
        gate: &LastCheck<'_>,
        window: &Arc<std::sync::Mutex<Option<OwnedSemaphorePermit>>>,
    ) -> Sent {
        let ctx = self.p.ctx();
        let Some(first) = letter.rows.first() else {
            return Sent::Done(None);
        };
        let invoice_id = first.invoice.id.clone();
        let finished = |delivery: Delivery| {
            Sent::Done(Some(
                letter
                    .rows
                    .iter()
                    .map(|row| Attempted {
                        id: row.id,
                        invoice: row.invoice.id.clone(),
                        step: row.step.clone(),
                        attempts_before: row.attempts,
                        message_id: letter.message_id.clone(),
                        delivery: delivery.clone(),
                    })
                    .collect(),
            ))
        };
        let mail = match self.composer.composed(letter).await {
            Ok(mail) => mail,
            Err(e) => {
                tracing::warn!(%invoice_id, error = %e, "reminder discarded");
                return finished(Delivery::Discarded {
                    error: e.to_string(),
                });
            }
        };
        // From here on the mail may reach the server: its rows are no longer
        // the end of the run's to return (a send that does not start puts
        // them back).
        self.p.unsent().handed_over(letter);
        let kept = Arc::clone(window);
        let on_written: mail::written::OnWritten = Box::new(move || {
            drop(kept.lock().unwrap_or_else(|p| p.into_inner()).take());
        });
        // A stop wakes a send waiting for its slot: the letter goes back.
        let mut stopped = Box::pin(self.p.stopped());
        match ctx
            .mailer
            .send(
                &mail,
                gate,
                &mut stopped,
                Some(on_written),
                self.p.timings(),
            )
            .await
        {
            Ok(accepted) => {
                // Taken for the others: an address that does not exist goes
                // on the suppression list, as when it was the only one.
                for refused in &accepted.refused {
                    tracing::warn!(%invoice_id, address = %refused.address, reply = %refused.reply, "the SMTP relay refused one recipient and took the message for the others");
                    if refused.gone {
                        self.suppress(&refused.address, &refused.reply, first).await;
                    }
                }
                let archive = ctx.settings.archive.store == ArchiveStore::Database;
                finished(mail::sent(mail, accepted, archive))
            }
            Err(SendError::NotStarted) if !gate.held_is_empty() => Sent::Withheld,
            Err(SendError::NotStarted) => Sent::Done(self.not_sent(letter)),
            Err(e @ SendError::LoginRefused { .. }) => {
                if self.p.stop(Stop::SmtpAuth) {
                    tracing::error!(error = %e, "the SMTP server refused our login (check smtp.username and smtp.password); no more mail is started this tick");
                }
                Sent::Done(self.not_sent(letter))
            }
            // The pacer gave up at the tick's bound: the relay never had
            // this message, which goes back unattempted with the rest.
            Err(e @ SendError::Throttled { .. }) => {
                if self.p.stop(Stop::Throttled) {
                    tracing::warn!(%invoice_id, error = %e, "the SMTP relay's pace does not fit in what is left of this tick's bound; no more mail is started this tick, the rest is handed back unattempted");
                }
                Sent::Done(self.not_sent(letter))
            }
            Err(e) => {
                if let SendError::AddressRejected { address, reason } = &e {
                    self.suppress(address, reason, first).await;
                }
                if e.is_unreachable() && self.p.stop(Stop::SmtpDown) {
                    tracing::error!(%invoice_id, error = %e, "SMTP server unreachable; handing back the rest of this tick");
                }
                finished(mail::classify(&invoice_id, e))
            }
        }
    }

    /// The relay rejected `address` for good: it goes on the suppression
    /// list (source `relay`, the relay's reply as the reason), so the
    /// customer's later steps are recorded `skipped` as after a hard
    /// bounce; `suppress remove` undoes it. Not written: logged, and the
    /// relay rejects the next mail again.
    async fn suppress(&self, address: &str, reply: &str, row: &Claimed) {
        let detail = format!("invoice {} step {}", row.invoice.id, row.step);
        let entry = db::suppressions::NewSuppression {
            address,
            reason: reply,
            source: "relay",
            detail: Some(&detail),
        };
        match db::suppressions::add(&self.p.ctx().db, entry, None).await {
            Ok(_) => {
                tracing::warn!(
                    address,
                    reply,
                    "the SMTP relay rejected the address for good; it is on the suppression list now (`suppress remove` undoes it)"
                );
            }
            Err(e) => {
                tracing::warn!(address, reply, error = %e, "the SMTP relay rejected the address for good, but it could not be put on the suppression list");
            }
        }
    }

    fn not_sent(&self, letter: &Letter) -> Option<Vec<Attempted>> {
        self.p.not_sent(letter);
        None
    }
}

/// How one send of a letter ended.
enum Sent {
    /// Its results (None: nothing was sent, returned at the end).
    Done(Option<Vec<Attempted>>),
    /// The last check found rows held: they go back, the rest goes.
    Withheld,
}

/// The marked rows as a stream that notes how long it kept the senders
/// waiting: it is polled only when a send slot is free, so the time between
/// a poll that found nothing and the row that followed is time a slot
/// stood idle.
struct TimedRows<'t> {
    marked: mpsc::Receiver<Marked>,
    timings: &'t super::timings::Timings,
    /// When the senders began to wait, and what the marker did then.
    waiting_since: Option<(tokio::time::Instant, super::timings::MarkerWork)>,
}

impl futures::Stream for TimedRows<'_> {
    type Item = Marked;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Marked>> {
        let polled = self.marked.poll_recv(cx);
        match &polled {
            std::task::Poll::Pending => {
                if self.waiting_since.is_none() {
                    self.waiting_since =
                        Some((tokio::time::Instant::now(), self.timings.marker_now()));
                }
            }
            std::task::Poll::Ready(_) => {
                if let Some((since, marker)) = self.waiting_since.take() {
                    self.timings.senders_idle(marker, since.elapsed());
                }
            }
        }
        polled
    }
}
