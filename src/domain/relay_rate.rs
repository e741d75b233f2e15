//! The rate a relay was found to take, as the pacer (`mail::pace`) learns
//! it and the database (`db::relay_pace`) keeps it for every replica.

use std::time::Duration;

/// The relay's rate as learnt.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LearnedRate {
    /// The rate sends are paced at (messages a second); None: no limit.
    pub per_second: Option<f64>,
    /// The rate the relay accepted between its last two throttles.
    pub measured: Option<f64>,
    /// Raises since the last throttle.
    pub raises: u32,
    /// How long since the last throttle or raise.
    pub quiet_for: Duration,
}
