//! Is this process still doing its job? Written by the scheduler loop,
//! read by `/healthz` and by `run`'s supervisor.
//!
//! Liveness never asks the database or the lock backend: an outage of
//! either must not get healthy replicas restarted (that is `/readyz`'s
//! question). It fails when the scheduler loop is gone, or when one tick
//! has been running longer than `schedule.max_tick_duration` (a hang).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Shared state of the scheduler loop. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Liveness {
    inner: Arc<Mutex<State>>,
    max_tick: Duration,
}

#[derive(Debug, Default)]
struct State {
    loop_running: bool,
    tick_started: Option<Instant>,
}

/// Why the process is not live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    LoopStopped,
    TickOverrun { running: Duration, limit: Duration },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LoopStopped => f.write_str("the scheduler loop is not running"),
            Self::TickOverrun { running, limit } => write!(
                f,
                "a tick has been running for {}s, longer than schedule.max_tick_duration ({})",
                running.as_secs(),
                humantime::format_duration(*limit)
            ),
        }
    }
}

impl Liveness {
    pub fn new(max_tick: Duration) -> Self {
        Self {
            inner: Arc::default(),
            max_tick,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_loop_running(&self, running: bool) {
        self.state().loop_running = running;
    }

    pub fn tick_started(&self) {
        self.state().tick_started = Some(Instant::now());
    }

    pub fn tick_finished(&self) {
        self.state().tick_started = None;
    }

    /// Ok while live; otherwise why not.
    pub fn check(&self) -> Result<(), Failure> {
        let state = self.state();
        if !state.loop_running {
            return Err(Failure::LoopStopped);
        }
        match state.tick_started.map(|t| t.elapsed()) {
            Some(running) if running > self.max_tick => Err(Failure::TickOverrun {
                running,
                limit: self.max_tick,
            }),
            _ => Ok(()),
        }
    }

    /// Resolves once a tick has run past `schedule.max_tick_duration`.
    pub async fn overrun(&self) -> Failure {
        loop {
            let started = self.state().tick_started;
            let wake = match started {
                Some(t) => (t + self.max_tick + Duration::from_millis(1)).max(Instant::now()),
                None => Instant::now() + Duration::from_millis(500),
            };
            tokio::time::sleep_until(wake.min(Instant::now() + Duration::from_millis(500))).await;
            if let Err(f @ Failure::TickOverrun { .. }) = self.check() {
                return f;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tick_past_the_limit_is_an_overrun() {
        let live = Liveness::new(Duration::from_secs(10));
        assert_eq!(live.check(), Err(Failure::LoopStopped));
        live.set_loop_running(true);
        live.tick_started();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(live.check(), Ok(()));
        let overrun = live.overrun().await;
        assert!(matches!(overrun, Failure::TickOverrun { .. }), "{overrun}");
        live.tick_finished();
        assert_eq!(live.check(), Ok(()));
    }
}
