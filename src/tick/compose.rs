//! A message composed for a marked letter, as `preview` would build it.
//! A message that carries a late-payment letter is composed on a blocking
//! thread, a few at a time: each is a burst of CPU (the PDF), and dozens
//! at once (one per letter in flight) crowd out the runtime's threads and
//! the relay's, so every connection waits longer between messages.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::pipeline::Pipeline;
use crate::domain::{Claimed, Letter, LetterKind};
use crate::mail;

/// Composes the tick's messages.
pub(super) struct Composer {
    p: Arc<Pipeline>,
    /// Letters composed at once: half the cores, at least one.
    composing: Arc<Semaphore>,
}

impl Composer {
    pub fn new(p: Arc<Pipeline>) -> Self {
        Self {
            p,
            composing: Arc::new(Semaphore::new(composers())),
        }
    }

    /// The message for `letter` ([`compose`]): on a blocking thread when it
    /// carries a late-payment letter (a PDF is a tenth of a millisecond of CPU or more,
    /// which would hold up every other send of the tick's thread), inline
    /// otherwise.
    pub async fn composed(
        &self,
        letter: &Letter,
    ) -> Result<mail::OutgoingMail, mail::MessageError> {
        if !carries_letter(&self.p.ctx().settings, letter) {
            return compose(&self.p, letter);
        }
        // Never closed: the permit is always given.
        let permit = Arc::clone(&self.composing).acquire_owned().await.ok();
        let (p, owned) = (Arc::clone(&self.p), letter.clone());
        let invoice_id = letter
            .rows
            .first()
            .map(|r| r.invoice.id.clone())
            .unwrap_or_default();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            compose(&p, &owned)
        })
        .await
        .unwrap_or_else(|e| {
            Err(mail::MessageError::Render {
                invoice_id,
                reason: format!("composing the letter stopped: {e}"),
            })
        })
    }
}

/// How many letters are composed at once: half the cores, at least one.
fn composers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// The message for `letter`, as `preview` would build it: the stage's
/// template for one invoice, or the customer's statement; under the
/// letter's Message-ID, stored on its rows by the mark.
fn compose(p: &Pipeline, letter: &Letter) -> Result<mail::OutgoingMail, mail::MessageError> {
    let settings = &p.ctx().settings;
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
            &p.ctx().templates,
            stages,
            &settings.smtp,
            &first.invoice,
            &first.customer,
            line.step,
            letter.message_id.clone(),
            &first.thread,
            p.today(),
        ),
        LetterKind::Statement => mail::compose_statement(
            &p.ctx().templates,
            stages,
            &settings.smtp,
            &lines,
            &first.customer,
            letter.message_id.clone(),
            &customer_thread(letter),
            p.today(),
        ),
    }
}

/// Whether `letter` carries a late-payment letter: a row whose stage has
/// `letter = true`, under a regime other than `none`.
fn carries_letter(settings: &crate::config::Settings, letter: &Letter) -> bool {
    let stages = &settings.reminders.stages;
    letter.rows.iter().any(|row| {
        let regime = row
            .invoice
            .late_payment_regime
            .unwrap_or(settings.late_payment.regime);
        regime != crate::domain::Regime::None
            && step_of(stages, row).is_ok_and(|step| stages.stage(step).letter)
    })
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
