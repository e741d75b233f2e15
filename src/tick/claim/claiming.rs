//! What every claim of a tick shares: today's conditions (`db::owing`), room
//! in the claim bound, the fence, and how a claim's refusals are counted.
//! A claim statement re-checks everything the page said, in one snapshot:
//! whatever it refuses (paid meanwhile, claimed by someone else, a key
//! that now has two rows) is reported here, never sent.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::db;
use crate::db::claims::Superseded;
use crate::db::customers::Retries;
use crate::db::owing::OwingDay;
use crate::db::reminders::{Claim, ClaimError, ClaimedRow};
use crate::domain::{Attempted, Counts, count_of};
use crate::lock::LostReason;
use crate::problems;
use crate::stages::Window;
use crate::tick::bounds::Reservation;
use crate::tick::pipeline::Pipeline;
use crate::tick::timings::Spent;
use crate::tick::{TickError, db_err};

/// The claim phase's shared state for one tick.
pub(in crate::tick) struct Claiming {
    p: Arc<Pipeline>,
    /// Each step's due dates on any local date today, oldest first.
    windows: Vec<Window>,
    today: OwingDay,
    retries: Retries,
    /// The record phase: claimed rows that are not sent at all (every
    /// recipient suppressed) go straight there.
    skipped: mpsc::Sender<Vec<Attempted>>,
}

impl Claiming {
    pub fn new(p: Arc<Pipeline>, skipped: mpsc::Sender<Vec<Attempted>>) -> Self {
        let settings = &p.ctx().settings;
        let r = &settings.reminders;
        let today = OwingDay::from_settings(settings, p.now(), p.today());
        let windows = today.scans().to_vec();
        let waiting = today.waiting_regimes();
        p.ctx().metrics.rates_out_of_date(waiting);
        let regime = settings.late_payment.regime.name();
        if waiting.iter().any(|w| w == regime) && !r.stages.late_payment_keys().is_empty() {
            tracing::warn!(
                regime,
                "late-payment stages wait: late_payment.rates_file has no rate for today's half-year for late_payment.regime (docs/late-payment.md); other stages go"
            );
        }
        let retries = Retries::from_settings(r, p.run_id());
        Self {
            p,
            windows,
            today,
            retries,
            skipped,
        }
    }

    pub fn p(&self) -> &Pipeline {
        &self.p
    }

    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    pub fn today(&self) -> &OwingDay {
        &self.today
    }

    pub fn retries(&self) -> &Retries {
        &self.retries
    }

    /// The record phase, for rows recorded without a send.
    pub fn skipped(&self) -> &mpsc::Sender<Vec<Attempted>> {
        &self.skipped
    }

    /// How many rows the next read or claim may take, besides `pending`
    /// rows being claimed meanwhile: `batch_size`, or less near
    /// `reminders.max_per_tick`; None once the tick's share is claimed (or
    /// the tick stopped).
    pub fn room(&self, pending: usize) -> Option<u32> {
        if self.p.stop_reason().is_some() {
            return None;
        }
        let reminders = &self.p.ctx().settings.reminders;
        let batch_size = reminders.batch_size;
        let Some(max) = reminders.max_per_tick else {
            return Some(batch_size);
        };
        let left = max
            .saturating_sub(self.p.counts().claimed)
            .saturating_sub(count_of(pending));
        if left == 0 {
            tracing::info!(
                max_per_tick = max,
                "reminders.max_per_tick reached; the rest waits for the next tick"
            );
            return None;
        }
        Some(left.min(batch_size))
    }

    /// Waits for room for `n` more claimed rows within the claim bound;
    /// None if the tick stops meanwhile.
    pub async fn reserve(&self, n: usize) -> Option<Reservation<'_>> {
        let reserving = self.p.bound().reserve(n);
        let reserved = self
            .p
            .timings()
            .time(Spent::ClaimWaitingForRoom, reserving)
            .await?;
        self.p.stop_reason().is_none().then_some(reserved)
    }

    /// A refused claim means a newer holder exists: the lease is lost.
    /// Ok(None): stop claiming.
    pub fn fenced<T>(
        &self,
        claimed: Result<T, ClaimError>,
        doing: &'static str,
    ) -> Result<Option<T>, TickError> {
        match claimed {
            Ok(rows) => Ok(Some(rows)),
            Err(ClaimError::Fenced { token }) => {
                tracing::warn!(
                    fence = token,
                    "claim refused: a newer lock holder has written; stopping"
                );
                self.p.lose(LostReason::Fenced);
                Ok(None)
            }
            Err(ClaimError::Database(e)) => Err(db_err(doing)(e)),
        }
    }

    /// The rows a claim of `asked` keys took; the keys it found repeated
    /// are reported, the others it refused counted `skipped`.
    pub fn took(&self, asked: usize, claim: Claim) -> Vec<ClaimedRow> {
        let repeated = problems::repeated_keys(&claim.repeated);
        let refused = repeated.len();
        for problem in repeated {
            self.p.problem(problem);
        }
        let skipped = asked
            .saturating_sub(claim.claimed.len())
            .saturating_sub(refused);
        self.p.add(&Counts {
            skipped: count_of(skipped),
            ..Counts::default()
        });
        claim.claimed
    }

    /// Records `steps` `skipped` as superseded (the gap keeps each back
    /// past its window's end): reported, never sent. Ok(false): stop
    /// claiming (fenced).
    pub async fn record_superseded(&self, steps: &[Superseded]) -> Result<bool, TickError> {
        if steps.is_empty() {
            return Ok(true);
        }
        let recording = db::claims::record_superseded(
            &self.p.ctx().phases.claims,
            steps,
            self.p.run_id(),
            self.p.fence(),
        );
        let Some(recorded) = self.fenced(recording.await, "recording superseded steps")? else {
            return Ok(false);
        };
        self.superseded(recorded);
        Ok(true)
    }

    /// `recorded` steps were recorded superseded: counted, and logged.
    pub fn superseded(&self, recorded: u64) {
        if recorded > 0 {
            tracing::info!(
                superseded = recorded,
                "steps the gap (reminders.min_days_between) keeps back past their window were recorded as superseded"
            );
        }
        self.p.add(&Counts {
            superseded: u32::try_from(recorded).unwrap_or(u32::MAX),
            ..Counts::default()
        });
    }
}
