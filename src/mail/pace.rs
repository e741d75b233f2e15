//! How fast, and over how many connections, we send to a relay that
//! throttles: additive increase, multiplicative decrease (AIMD), decided
//! once per tick from what the relay did in it.
//!
//! A relay throttles with 4.7.x replies, `421` on connect, or "too many
//! connections" / "too much mail" (Postfix's anvil limits, Office 365's
//! concurrency cap). That is not an outage: the tick stops starting mail
//! (the rows go back unattempted) and the next tick sends at half the rate
//! the relay accepted before it refused, over half the connections. Every
//! tick that sends without being throttled raises the rate by
//! [`STEP_PER_SECOND`] (and the connections by one), never above
//! `smtp.max_per_second` and `smtp.pool_size`, so the rate settles just
//! under what the relay allows and follows it when its limits change. The
//! pace is stored in the database (`relay_pace`), so every replica shares
//! it (see docs/operating.md, "A relay that throttles").

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The lowest rate a throttled relay takes us down to (messages a second).
pub const MIN_PER_SECOND: f64 = 0.1;

/// How much each tick that was not throttled adds to the rate.
pub const STEP_PER_SECOND: f64 = 1.0;

/// How we send now: at most `per_second` messages a second (None: as
/// fast as the connections go), over at most `connections`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    pub per_second: Option<f64>,
    pub connections: u32,
}

impl Pace {
    /// The configured pace: `smtp.max_per_second` (0: none) and
    /// `smtp.pool_size`.
    pub fn configured(max_per_second: Option<u32>, pool_size: u32) -> Self {
        Self {
            per_second: max_per_second.map(f64::from),
            connections: pool_size.max(1),
        }
    }

    /// `stored` (the pace the relay was last found to take), never faster
    /// or wider than configured.
    pub fn within(self, stored: Option<Pace>) -> Self {
        let Some(stored) = stored else {
            return self;
        };
        Self {
            per_second: match (self.per_second, stored.per_second) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            connections: self.connections.min(stored.connections).max(1),
        }
    }
}

/// What the relay did with one tick's mail.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Seen {
    /// Messages it accepted.
    pub accepted: u64,
    /// From the first message started to the last one accepted.
    pub sending: Duration,
    /// It throttled us (after `accepted` messages over `sending`).
    pub throttled: bool,
}

impl Seen {
    /// The rate the relay accepted (messages a second), if it accepted any
    /// over a measurable time.
    pub fn accepted_per_second(&self) -> Option<f64> {
        let secs = self.sending.as_secs_f64();
        (self.accepted > 0 && secs > 0.0).then(|| self.accepted as f64 / secs)
    }
}

/// The pace for the next tick, after `now` met `seen`, within
/// `configured`. Unchanged when the tick sent nothing (nothing learnt).
pub fn next_pace(now: Pace, seen: &Seen, configured: Pace) -> Pace {
    if seen.throttled {
        let accepted = seen.accepted_per_second();
        let base = match (now.per_second, accepted) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(MIN_PER_SECOND * 2.0),
        };
        return Pace {
            per_second: Some((base / 2.0).max(MIN_PER_SECOND)),
            connections: (now.connections / 2).max(1),
        };
    }
    if seen.accepted == 0 {
        return now;
    }
    let per_second = now.per_second.map(|r| {
        let raised = r + STEP_PER_SECOND;
        configured.per_second.map_or(raised, |max| raised.min(max))
    });
    Pace {
        per_second,
        connections: now
            .connections
            .saturating_add(1)
            .min(configured.connections)
            .max(1),
    }
}

/// What the relay does with this tick's mail, noted as sends start and
/// end; [`Watch::take`] reads it at the end of the tick and starts over.
#[derive(Debug, Default)]
pub(super) struct Watch(Mutex<Watched>);

#[derive(Debug, Default)]
struct Watched {
    first_start: Option<Instant>,
    last_accepted: Option<Instant>,
    accepted: u64,
    throttled: bool,
}

impl Watch {
    fn watched(&self) -> MutexGuard<'_, Watched> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn started(&self) {
        self.watched().first_start.get_or_insert_with(Instant::now);
    }

    /// A message was accepted; counted only until the relay throttled.
    pub fn accepted(&self) {
        let mut w = self.watched();
        if !w.throttled {
            w.accepted = w.accepted.saturating_add(1);
            w.last_accepted = Some(Instant::now());
        }
    }

    pub fn throttled(&self) {
        self.watched().throttled = true;
    }

    pub fn take(&self) -> Seen {
        let w = std::mem::take(&mut *self.watched());
        Seen {
            accepted: w.accepted,
            sending: match (w.first_start, w.last_accepted) {
                (Some(first), Some(last)) => last.saturating_duration_since(first),
                _ => Duration::ZERO,
            },
            throttled: w.throttled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: Pace = Pace {
        per_second: None,
        connections: 8,
    };

    #[test]
    fn a_throttled_tick_halves_the_rate_the_relay_accepted_and_the_connections() {
        let seen = Seen {
            accepted: 300,
            sending: Duration::from_secs(3),
            throttled: true,
        };
        let next = next_pace(OPEN, &seen, OPEN);
        assert_eq!(next.per_second, Some(50.0));
        assert_eq!(next.connections, 4);
        // Throttled again at the lower pace: half of the pace, not of more.
        let again = next_pace(next, &seen, OPEN);
        assert_eq!((again.per_second, again.connections), (Some(25.0), 2));
    }

    #[test]
    fn a_tick_that_was_not_throttled_adds_a_step_up_to_the_configured_pace() {
        let now = Pace {
            per_second: Some(9.5),
            connections: 2,
        };
        let seen = Seen {
            accepted: 10,
            sending: Duration::from_secs(1),
            throttled: false,
        };
        let configured = Pace {
            per_second: Some(10.0),
            connections: 3,
        };
        let next = next_pace(now, &seen, configured);
        assert_eq!((next.per_second, next.connections), (Some(10.0), 3));
        assert_eq!(next_pace(next, &seen, configured), next);
        assert_eq!(next_pace(now, &Seen::default(), configured), now);
    }

    #[test]
    fn the_rate_never_falls_below_the_floor_nor_the_connections_below_one() {
        let slow = Pace {
            per_second: Some(MIN_PER_SECOND),
            connections: 1,
        };
        let seen = Seen {
            throttled: true,
            ..Seen::default()
        };
        assert_eq!(next_pace(slow, &seen, OPEN), slow);
    }

    #[test]
    fn the_stored_pace_is_used_within_the_configured_one() {
        let configured = Pace::configured(Some(20), 8);
        let stored = Pace {
            per_second: Some(50.0),
            connections: 2,
        };
        assert_eq!(
            configured.within(Some(stored)),
            Pace {
                per_second: Some(20.0),
                connections: 2
            }
        );
        assert_eq!(Pace::configured(None, 8).within(Some(stored)), stored);
        assert_eq!(configured.within(None), configured);
    }
}
