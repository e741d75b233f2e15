//! Learning the relay's long-term rate: what it accepted from the end of
//! one halt to the end of the next, over that time, paced a little below
//! (`SHARE`); raised after a quiet stretch, and let go after a few raises.

use tokio::time::Instant;

use super::limiter::{held, limiter};
use super::{FREE_AFTER, Halt, MIN_INTERVAL, MIN_RATE, Pacer, QUIET, RAISE, SHARE, State};

impl Pacer {
    /// A halt ended with an accepted probe now: the stretch since the
    /// last halt ended is measured (the relay's window, from its burst to
    /// halfway between the last refusal and this acceptance), and the
    /// probe starts the next stretch.
    pub(super) fn resumed(&self, s: &mut State, halt: Option<Halt>) -> Option<f64> {
        let now = Instant::now();
        let measured = match (s.resumed_at, halt) {
            (Some(from), Some(halt)) => {
                let half = now.saturating_duration_since(halt.refused_at) / 2;
                let over = (halt.refused_at + half).saturating_duration_since(from);
                (over >= MIN_INTERVAL && s.accepted_since > 0)
                    .then(|| s.accepted_since as f64 / over.as_secs_f64())
            }
            _ => None,
        };
        s.resumed_at = Some(now);
        s.accepted_since = 1;
        let measured = measured?;
        let rate = measured * SHARE;
        let rate = s
            .learned
            .per_second
            .map_or(rate, |held| rate.min(held * SHARE))
            .max(MIN_RATE);
        s.learned.measured = Some(measured);
        s.learned.per_second = Some(rate);
        s.limiter = limiter(&self.clock, held(self.configured, Some(rate)));
        Some(rate)
    }

    pub(super) fn raise_when_quiet(&self, s: &mut State) {
        let Some(rate) = s.learned.per_second else {
            return;
        };
        if s.changed_at.elapsed() < QUIET {
            return;
        }
        s.changed_at = Instant::now();
        s.learned.raises = s.learned.raises.saturating_add(1);
        s.learned.per_second = (s.learned.raises < FREE_AFTER).then_some(rate * RAISE);
        if s.learned.per_second.is_none() {
            s.learned.raises = 0;
        }
        s.limiter = limiter(&self.clock, held(self.configured, s.learned.per_second));
    }
}
