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
use tokio::sync::mpsc;

use super::mark::Marked;
use super::pipeline::{Pipeline, Stop};
use super::timings::Spent;
use crate::config::ArchiveStore;
use crate::db;
use crate::domain::{Attempted, Claimed, Delivery, Letter, LetterKind};
use crate::mail::{self, SendError};

/// The send phase of one tick.
pub(super) struct Sender {
    p: Arc<Pipeline>,
}

impl Sender {
    pub fn new(p: Arc<Pipeline>) -> Self {
        Self { p }
    }

    /// Sends marked rows until the marker is done; hands each result on.
    pub async fn run(self, marked: mpsc::Receiver<Marked>, results: mpsc::Sender<Vec<Attempted>>) {
        let concurrency = usize::try_from(self.p.ctx().settings.reminders.send_concurrency)
            .unwrap_or(1)
            .max(1);
        let rows = TimedRows {
            marked,
            timings: self.p.timings(),
            waiting_since: None,
        };
        let mut outcomes = rows.map(|m| self.attempt(m)).buffer_unordered(concurrency);
        while let Some(attempt) = outcomes.next().await {
            if let Some(attempted) = attempt
                && results.send(attempted).await.is_err()
            {
                break;
            }
        }
    }

    /// One marked letter: check we may still send, build, send (the pacer
    /// gives it its slot), classify; one result per row, all the same.
    /// None: nothing was sent (returned at the end).
    async fn attempt(&self, marked: Marked) -> Option<Vec<Attempted>> {
        // The letter's place in the in-flight limit: held until its end has
        // left us on a connection (or the send ends without that).
        let Marked { letter, permit } = marked;
        let mut window = Some(permit);
        let ctx = self.p.ctx();
        let first = letter.rows.first()?;
        let invoice_id = first.invoice.id.clone();
        if let Some(stop) = self.p.stop_reason() {
            tracing::debug!(%invoice_id, ?stop, "not sending");
            return self.not_sent(&letter);
        }
        let finished = |delivery: Delivery| {
            Some(
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
            )
        };
        let mail = match self.compose(&letter) {
            Ok(mail) => mail,
            Err(e) => {
                tracing::warn!(%invoice_id, error = %e, "reminder discarded");
                return finished(Delivery::Discarded {
                    error: e.to_string(),
                });
            }
        };
        // Checked again once a connection is ours: waiting for one may have
        // outlasted the lease.
        let may_start = || self.p.stop_reason().is_none();
        // From here on the mail may reach the server: its rows are no longer
        // the end of the run's to return (a send that does not start puts
        // them back).
        self.p.unsent().handed_over(&letter);
        let on_written: Option<mail::written::OnWritten> = window
            .take()
            .map(|permit| -> mail::written::OnWritten { Box::new(move || drop(permit)) });
        // A stop wakes a send waiting for its slot: the letter goes back.
        let mut stopped = Box::pin(self.p.stopped());
        match ctx
            .mailer
            .send(&mail, &may_start, &mut stopped, on_written)
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
            Err(SendError::NotStarted) => self.not_sent(&letter),
            Err(e @ SendError::LoginRefused { .. }) => {
                if self.p.stop(Stop::SmtpAuth) {
                    tracing::error!(error = %e, "the SMTP server refused our login (check smtp.username and smtp.password); no more mail is started this tick");
                }
                self.not_sent(&letter)
            }
            Err(e @ SendError::Throttled { .. }) => {
                if self.p.stop(Stop::Throttled) {
                    tracing::warn!(%invoice_id, error = %e, "the SMTP relay kept throttling us for as long as this tick may wait; no more mail is started this tick");
                }
                finished(mail::classify(&invoice_id, e))
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

    /// The message for `letter`, as `preview` would build it: the stage's
    /// template for one invoice, or the customer's statement; under the
    /// letter's Message-ID, stored on its rows by the mark.
    fn compose(&self, letter: &Letter) -> Result<mail::OutgoingMail, mail::MessageError> {
        let settings = &self.p.ctx().settings;
        let stages = &settings.reminders.stages;
        let mut lines = Vec::with_capacity(letter.rows.len());
        for row in &letter.rows {
            lines.push(mail::statement::Line {
                invoice: &row.invoice,
                step: step_of(stages, row)?,
            });
        }
        let (Some(first), Some(line)) = (letter.rows.first(), lines.first()) else {
            return Err(mail::MessageError::Render {
                invoice_id: Default::default(),
                reason: "a message without reminders".into(),
            });
        };
        match letter.kind {
            LetterKind::Reminder => mail::compose(
                &self.p.ctx().templates,
                stages,
                &settings.smtp,
                &first.invoice,
                &first.customer,
                line.step,
                letter.message_id.clone(),
                &first.thread,
                self.p.today(),
            ),
            LetterKind::Statement => mail::compose_statement(
                &self.p.ctx().templates,
                stages,
                &settings.smtp,
                &lines,
                &first.customer,
                letter.message_id.clone(),
                &customer_thread(letter),
                self.p.today(),
            ),
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
        match db::suppressions::add(&self.p.ctx().db, entry).await {
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

/// A statement's thread: the Message-IDs its rows' earlier mail carried,
/// each once, in the order the claim read them (its first row reads the
/// customer's statements, oldest first; the others their invoice's own).
fn customer_thread(letter: &Letter) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    letter
        .rows
        .iter()
        .flat_map(|r| &r.thread)
        .filter(|id| seen.insert(id.as_str()))
        .cloned()
        .collect()
}

/// The configured step a claimed row is for.
fn step_of<'s>(
    stages: &'s crate::stages::Stages,
    row: &Claimed,
) -> Result<&'s crate::stages::Step, mail::MessageError> {
    stages
        .step(row.step.as_str())
        .ok_or_else(|| mail::MessageError::Render {
            invoice_id: row.invoice.id.clone(),
            reason: format!(
                "step {:?} is not one of reminders.stages (was the configuration changed?)",
                row.step
            ),
        })
}

/// The marked rows as a stream that notes how long it kept the senders
/// waiting: it is polled only when a send slot is free, so the time between
/// a poll that found nothing and the row that followed is time a slot
/// stood idle.
struct TimedRows<'t> {
    marked: mpsc::Receiver<Marked>,
    timings: &'t super::timings::Timings,
    waiting_since: Option<tokio::time::Instant>,
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
                self.waiting_since
                    .get_or_insert_with(tokio::time::Instant::now);
            }
            std::task::Poll::Ready(_) => {
                if let Some(since) = self.waiting_since.take() {
                    self.timings.add(Spent::SendWaitingForRows, since.elapsed());
                }
            }
        }
        polled
    }
}
