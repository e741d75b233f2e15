//! How fast we send to a relay that throttles: the pacer.
//!
//! A relay throttles with its own signals (`421` or 4.7.x on connect, EHLO
//! or MAIL, "too many connections", "too much mail"); a 4.7.x on one RCPT
//! is that recipient's, not the relay's. A throttle is not an outage:
//!
//! - **Halt and probe.** The refused message waits, with every other one,
//!   while single probes ask the relay again after growing gaps
//!   ([`FIRST_GAP`] × [`GAP_GROWTH`], at most [`MAX_GAP`]); the first probe
//!   it accepts ends the halt. A refused message uses no attempt.
//! - **Learn the long-term rate.** The messages the relay accepted from the
//!   end of one halt to the end of the next, over the time between them,
//!   is the rate it lets through over time (its bursts and windows
//!   included); a halt is taken to have ended halfway between its last
//!   refused probe and the accepted one. Sends are paced a little
//!   below it ([`SHARE`]) by a GCRA rate limiter (`governor`), messages
//!   spaced evenly, never faster than `smtp.max_per_second`; a throttle
//!   while a rate is paced lowers it.
//! - **Probe above it, and let go.** Every [`QUIET`] without a throttle
//!   raises the rate by [`RAISE`]; after [`FREE_AFTER`] raises without one
//!   the limit is dropped: the relay stopped throttling.
//! - **Give up within the tick's bound.** A halt longer than the tick may
//!   wait ([`Pacer::bound_halts`]), or a slot under the paced rate that
//!   would come after it, ends the tick `throttled`, the rest handed back
//!   unattempted; a stop (shutdown, a lost lease) wakes every waiting send.
//!   The learnt rate never goes below [`MIN_RATE`].
//!
//! The learnt rate is stored per relay (`db::relay_pace`) and shared by the
//! replicas (docs/operating.md, "A relay that throttles").

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::domain::LearnedRate;
use limiter::{Limiter, TokioClock, held, limiter};

/// The first gap between a throttle and the probe after it.
pub const FIRST_GAP: Duration = Duration::from_millis(250);
/// Each refused probe makes the next gap this much longer.
pub const GAP_GROWTH: f64 = 1.5;
/// The longest gap between probes.
pub const MAX_GAP: Duration = Duration::from_secs(2);
/// The share of the measured rate that sends are paced at.
pub const SHARE: f64 = 0.95;
/// A measurement over less time than this is a burst, not a rate.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How long without a throttle before the rate is raised.
pub const QUIET: Duration = Duration::from_secs(300);
/// How much a quiet stretch raises the rate.
pub const RAISE: f64 = 1.1;
/// Raises without a throttle after which the limit is dropped.
pub const FREE_AFTER: u32 = 3;
/// The lowest rate learnt or restored (messages a second): a few
/// throttles in a row, or a bad measurement, never pin sending below it.
/// A relay slower than this is set with `smtp.max_per_second`.
pub const MIN_RATE: f64 = 1.0;

/// What the relay did since [`Pacer::take_seen`] was last called.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Seen {
    pub accepted: u64,
    /// Messages it refused as throttling (probes included).
    pub refused: u64,
    /// Throttles that started a halt.
    pub halts: u64,
}

/// A send's permission: at the paced rate, or the probe of a halt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Open,
    Probe,
}

/// Why no slot came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// The stop future resolved.
    Stopped,
    /// The relay kept refusing past the bound ([`Pacer::bound_halts`]),
    /// or the next slot under the paced rate comes after it.
    GaveUp,
}

/// Paces one replica's sends to one relay. Shared by every send.
pub struct Pacer {
    configured: Option<f64>,
    clock: TokioClock,
    state: Mutex<State>,
    changed: Notify,
}

struct State {
    learned: LearnedRate,
    changed_at: Instant,
    limiter: Option<Limiter>,
    /// When the last halt ended, and what the relay accepted since (None:
    /// no halt yet in this stretch of sending).
    resumed_at: Option<Instant>,
    accepted_since: u64,
    halt: Option<Halt>,
    give_up_at: Option<Instant>,
    halt_bound: Option<Duration>,
    seen: Seen,
}

#[derive(Debug, Clone, Copy)]
struct Halt {
    until: Instant,
    gap: Duration,
    probing: bool,
    /// The last refusal: the throttle, then each refused probe.
    refused_at: Instant,
}

enum Wait {
    Until(Option<Instant>),
    GaveUp,
}

impl Pacer {
    /// A pacer within `smtp.max_per_second` (None: no limit).
    pub fn new(max_per_second: Option<u32>) -> Self {
        let now = Instant::now();
        let mut state = State {
            learned: LearnedRate::default(),
            changed_at: now,
            limiter: None,
            resumed_at: None,
            accepted_since: 0,
            halt: None,
            give_up_at: None,
            halt_bound: None,
            seen: Seen::default(),
        };
        let configured = max_per_second.map(f64::from);
        let clock = TokioClock(now);
        state.limiter = limiter(&clock, held(configured, None));
        Self {
            configured,
            clock,
            state: Mutex::new(state),
            changed: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes up `learned` (read from the database as a tick starts); what
    /// the relay accepted since a throttle starts over, as sending does.
    pub fn restore(&self, learned: LearnedRate) {
        let mut s = self.state();
        let now = Instant::now();
        let learned = LearnedRate {
            per_second: learned.per_second.map(|r| r.max(MIN_RATE)),
            ..learned
        };
        let rate_changed = s.learned.per_second != learned.per_second;
        s.learned = learned;
        s.changed_at = now.checked_sub(learned.quiet_for).unwrap_or(now);
        s.resumed_at = None;
        s.accepted_since = 0;
        if rate_changed {
            s.limiter = limiter(&self.clock, held(self.configured, learned.per_second));
        }
    }

    /// The rate as learnt now, to store.
    pub fn learned(&self) -> LearnedRate {
        let s = self.state();
        LearnedRate {
            quiet_for: s.changed_at.elapsed(),
            ..s.learned
        }
    }

    /// The rate sends are paced at now (None: no limit).
    pub fn per_second(&self) -> Option<f64> {
        held(self.configured, self.state().learned.per_second)
    }

    /// Whether sending is halted by a throttle.
    pub fn halted(&self) -> bool {
        self.state().halt.is_some()
    }

    /// A halt lasting past `bound` from a tick's start gives up (half of
    /// `schedule.max_tick_duration`, set where the worker starts; without
    /// it a halt lasts until the tick stops).
    pub fn bound_halts(&self, bound: Duration) {
        self.state().halt_bound = Some(bound);
    }

    /// A tick started `at`: its halts give up at `at` + the bound.
    pub fn tick_started(&self, at: Instant) {
        let mut s = self.state();
        s.give_up_at = s.halt_bound.and_then(|bound| at.checked_add(bound));
        self.changed.notify_waiters();
    }

    /// What the relay did since the last call.
    pub fn take_seen(&self) -> Seen {
        std::mem::take(&mut self.state().seen)
    }

    /// Waits for this send's slot: a place under the paced rate, or the
    /// probe of a halt. `stopped` resolving wakes it at once.
    pub async fn ready<S>(&self, stopped: &mut S) -> Result<Slot, NotReady>
    where
        S: Future<Output = ()> + Unpin + ?Sized,
    {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let until = match self.try_slot() {
                Ok(slot) => return Ok(slot),
                Err(Wait::GaveUp) => return Err(NotReady::GaveUp),
                Err(Wait::Until(until)) => until,
            };
            let sleep = async {
                match until {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut *stopped => return Err(NotReady::Stopped),
                () = changed => {}
                () = sleep => {}
            }
        }
    }

    fn try_slot(&self) -> Result<Slot, Wait> {
        let mut guard = self.state();
        let s = &mut *guard;
        let now = Instant::now();
        let give_up_at = s.give_up_at;
        if let Some(halt) = s.halt.as_mut() {
            if give_up_at.is_some_and(|at| now >= at) {
                return Err(Wait::GaveUp);
            }
            if halt.probing {
                return Err(Wait::Until(give_up_at));
            }
            if now >= halt.until {
                halt.probing = true;
                return Ok(Slot::Probe);
            }
            let until = give_up_at.map_or(halt.until, |at| at.min(halt.until));
            return Err(Wait::Until(Some(until)));
        }
        match s.limiter.as_ref().map(Limiter::check) {
            None | Some(Ok(())) => Ok(Slot::Open),
            Some(Err(not_until)) => {
                let at = now + not_until.wait_time_from(self.clock.elapsed());
                // A slot past the tick's bound is waited for no more than
                // a halt is.
                if give_up_at.is_some_and(|bound| at > bound) {
                    return Err(Wait::GaveUp);
                }
                Err(Wait::Until(Some(at)))
            }
        }
    }

    /// The relay accepted the message sent in `slot`. Some: the rate
    /// learnt as this ended a halt. Only a probe ends a halt: a message
    /// that was on its way when the halt began says nothing of now.
    pub fn accepted(&self, slot: Slot) -> Option<f64> {
        let mut guard = self.state();
        let s = &mut *guard;
        s.seen.accepted = s.seen.accepted.saturating_add(1);
        let learned = match slot {
            Slot::Probe => {
                let halt = s.halt.take();
                self.changed.notify_waiters();
                self.resumed(s, halt)
            }
            Slot::Open => {
                s.accepted_since = s.accepted_since.saturating_add(1);
                None
            }
        };
        self.raise_when_quiet(s);
        learned
    }

    /// The relay answered `slot`'s message otherwise than by throttling
    /// (a refusal of the message or its recipient): a probe so answered
    /// ends the halt, the relay takes mail again.
    pub fn answered(&self, slot: Slot) {
        if slot == Slot::Probe {
            let mut s = self.state();
            s.halt = None;
            s.resumed_at = Some(Instant::now());
            s.accepted_since = 0;
            self.changed.notify_waiters();
        }
    }

    /// `slot` was not used (the send did not start): a probe goes to the
    /// next waiting send.
    pub fn returned(&self, slot: Slot) {
        if slot == Slot::Probe {
            if let Some(halt) = self.state().halt.as_mut() {
                halt.probing = false;
            }
            self.changed.notify_waiters();
        }
    }

    /// The relay throttled the message sent in `slot`: halt (true: this
    /// throttle started the halt), or wait longer for the next probe.
    pub fn throttled(&self, slot: Slot) -> bool {
        let mut guard = self.state();
        let s = &mut *guard;
        let now = Instant::now();
        s.seen.refused = s.seen.refused.saturating_add(1);
        if let Some(halt) = s.halt.as_mut() {
            if slot == Slot::Probe {
                let gap = halt.gap.mul_f64(GAP_GROWTH).min(MAX_GAP);
                *halt = Halt {
                    until: now + gap,
                    gap,
                    probing: false,
                    refused_at: now,
                };
                self.changed.notify_waiters();
            }
            return false;
        }
        s.seen.halts = s.seen.halts.saturating_add(1);
        s.halt = Some(Halt {
            until: now + FIRST_GAP,
            gap: FIRST_GAP,
            probing: false,
            refused_at: now,
        });
        s.changed_at = now;
        s.learned.raises = 0;
        true
    }

    /// Sending stopped for now (the tick ended): the next stretch measures
    /// from its own first throttle, and no halt outlives the tick.
    pub fn ended(&self) {
        let mut s = self.state();
        s.resumed_at = None;
        s.accepted_since = 0;
        s.halt = None;
        s.give_up_at = None;
    }
}

mod learn;
mod limiter;

#[cfg(test)]
mod tests;
