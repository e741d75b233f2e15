//! The send stage: claimed reminders are marked started a few at a time
//! (never more than `send_concurrency` marked and unfinished), then built
//! and sent, `send_concurrency` at a time over the SMTP pool.
//!
//! A row is sent only if this run's mark on it took effect, so a row that
//! another run returned (this run's lease looked over) is never sent here.
//! Rows never marked are returned at the end of the run, or by a later run
//! if this process dies; rows marked but then stopped before any byte went
//! to SMTP are returned at the end too.

use std::collections::VecDeque;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::pipeline::{Pipeline, Stop};
use crate::db;
use crate::domain::{Attempted, Claimed, Counts, Delivery, ReminderId};
use crate::mail::{self, SendError};

/// What the marker hands the senders.
enum Next {
    /// Marked started; sends while holding its `started` permit.
    Send(Box<Claimed>, OwnedSemaphorePermit),
    /// This many claimed rows will not be sent this tick.
    Skip(usize),
}

/// What happened to one claimed row in this tick.
enum Attempt {
    /// Nothing was sent; the row is returned at the end of the run.
    NotSent,
    Finished(Attempted),
}

struct Marker {
    buffer: VecDeque<Claimed>,
    ready: VecDeque<Next>,
}

impl Pipeline<'_> {
    pub(super) async fn send_all(
        &self,
        claimed: mpsc::Receiver<Vec<Claimed>>,
        results: mpsc::Sender<Attempted>,
    ) {
        let settings = &self.ctx.settings.reminders;
        let (ready, next) = mpsc::channel::<Next>(1);
        let marking = self.mark_all(claimed, ready);
        let sending = async {
            let mut outcomes = tokio_stream::wrappers::ReceiverStream::new(next)
                .map(|next| self.handle(next))
                .buffer_unordered(settings.send_concurrency as usize);
            while let Some(attempt) = outcomes.next().await {
                if let Attempt::Finished(attempted) = attempt
                    && results.send(attempted).await.is_err()
                {
                    break;
                }
            }
        };
        tokio::join!(marking, sending);
    }

    /// Takes claimed batches, marks their rows started a few at a time and
    /// passes each on.
    async fn mark_all(&self, mut claimed: mpsc::Receiver<Vec<Claimed>>, ready: mpsc::Sender<Next>) {
        let mut m = Marker {
            buffer: VecDeque::new(),
            ready: VecDeque::new(),
        };
        loop {
            while let Some(next) = m.ready.pop_front() {
                if ready.send(next).await.is_err() {
                    return;
                }
            }
            if m.buffer.is_empty() {
                match claimed.recv().await {
                    Some(batch) => m.buffer.extend(batch),
                    None => return,
                }
                continue;
            }
            self.mark_some(&mut m).await;
        }
    }

    async fn handle(&self, next: Next) -> Attempt {
        match next {
            Next::Send(reminder, permit) => self.attempt(*reminder, permit).await,
            Next::Skip(n) => {
                self.unrecorded.add_permits(n);
                Attempt::NotSent
            }
        }
    }

    /// Marks as many buffered rows started as there are free `started`
    /// permits (at least one, waiting for it), and queues what to do with
    /// each.
    async fn mark_some(&self, m: &mut Marker) {
        if self.stop_reason().is_some() {
            let n = m.buffer.len();
            m.buffer.clear();
            m.ready.push_back(Next::Skip(n));
            return;
        }
        let Ok(mut permits) = Arc::clone(&self.started).acquire_owned().await else {
            return;
        };
        let extra = self.started.available_permits().min(m.buffer.len() - 1);
        if extra > 0
            && let Ok(more) = Arc::clone(&self.started).try_acquire_many_owned(extra as u32)
        {
            permits.merge(more);
        }
        // One permit per row: each is released when that row's send ends.
        let mut singles = Vec::new();
        while permits.num_permits() > 1 {
            match permits.split(1) {
                Some(one) => singles.push(one),
                None => break,
            }
        }
        singles.push(permits);
        let take = singles.len().min(m.buffer.len());
        let rows: Vec<Claimed> = m.buffer.drain(..take).collect();
        let ids: Vec<ReminderId> = rows.iter().map(|r| r.id).collect();
        match db::deliveries::mark_started(&self.ctx.db, self.run_id, &ids).await {
            Ok(marked) => {
                let mut skipped = 0;
                for (row, permit) in rows.into_iter().zip(singles) {
                    if marked.contains(&row.id) {
                        m.ready.push_back(Next::Send(Box::new(row), permit));
                    } else {
                        // Returned by another run's sweep: not ours to send.
                        skipped += 1;
                    }
                }
                if skipped > 0 {
                    self.add(&Counts {
                        skipped,
                        ..Counts::default()
                    });
                    m.ready.push_back(Next::Skip(skipped as usize));
                }
            }
            Err(e) => {
                if self.stop(Stop::RecordFailed) {
                    tracing::error!(error = %e, "rows cannot be marked started; no more mail is started this tick");
                }
                // The mark may have committed with its reply lost: these rows
                // were never sent, so they are returned like unstarted ones.
                self.unsent
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(ids);
                m.ready.push_back(Next::Skip(rows.len()));
            }
        }
    }

    /// One marked reminder: wait for a rate slot, check we may still send,
    /// build, send, classify.
    async fn attempt(&self, reminder: Claimed, _started: OwnedSemaphorePermit) -> Attempt {
        let (id, invoice_id) = (reminder.id, reminder.invoice.id.clone());
        self.ctx.mailer.pace().await;
        if let Some(stop) = self.stop_reason() {
            tracing::debug!(%invoice_id, ?stop, "not sending");
            return self.not_sent(id);
        }
        let settings = &self.ctx.settings;
        let stages = &settings.reminders.stages;
        let built = match stages.step(&reminder.period) {
            Some(step) => mail::compose(
                &self.ctx.templates,
                stages,
                &settings.smtp,
                &reminder.invoice,
                &reminder.customer,
                step,
                self.today,
            ),
            None => Err(mail::MessageError::Render {
                invoice_id: invoice_id.clone(),
                reason: format!(
                    "step {:?} is not one of reminders.stages (was the configuration changed?)",
                    reminder.period
                ),
            }),
        };
        let finished = |delivery| {
            Attempt::Finished(Attempted {
                id,
                invoice: invoice_id.clone(),
                period: reminder.period.clone(),
                attempts_before: reminder.attempts,
                delivery,
            })
        };
        let mail = match built {
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
        let may_start = || self.stop_reason().is_none();
        match self.ctx.mailer.send(&mail, &may_start).await {
            Ok(()) => finished(Delivery::Sent {
                message_id: mail.message_id,
            }),
            Err(SendError::NotStarted) => self.not_sent(id),
            Err(e @ SendError::LoginRefused { .. }) => {
                if self.stop(Stop::SmtpAuth) {
                    tracing::error!(error = %e, "the SMTP server refused our login (check smtp.username and smtp.password); no more mail is started this tick");
                }
                self.not_sent(id)
            }
            Err(e) => {
                if e.is_unreachable() && self.stop(Stop::SmtpDown) {
                    tracing::error!(%invoice_id, error = %e, "SMTP server unreachable; handing back the rest of this tick");
                }
                finished(mail::classify(&invoice_id, e))
            }
        }
    }

    fn not_sent(&self, id: ReminderId) -> Attempt {
        self.unsent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
        self.unrecorded.add_permits(1);
        Attempt::NotSent
    }
}
