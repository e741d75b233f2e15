//! The rate limiter the pacer holds a rate with: governor's GCRA on
//! tokio's clock (so tests on a paused clock see it too), one message
//! every 1/rate seconds, no bursts.

use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

/// The clock of `tokio::time` (paused in tests), as governor's.
#[derive(Debug, Clone)]
pub(super) struct TokioClock(pub(super) Instant);

impl TokioClock {
    /// Now, as the limiter reads it.
    pub(super) fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

impl Clock for TokioClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

pub(super) type Limiter =
    RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Duration>>;

/// The rate to hold: the lower of the configured and the learnt one.
pub(super) fn held(configured: Option<f64>, learned: Option<f64>) -> Option<f64> {
    match (configured, learned) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A GCRA limiter letting one message through every 1/`per_second`
/// seconds, without bursts.
pub(super) fn limiter(clock: &TokioClock, per_second: Option<f64>) -> Option<Limiter> {
    let period = Duration::try_from_secs_f64(1.0 / per_second?).ok()?;
    let quota = Quota::with_period(period)?;
    Some(RateLimiter::direct_with_clock(quota, clock.clone()))
}
