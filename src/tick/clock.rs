//! The tick's clock: the database's instant and date, read once that
//! clock has reached the fire's slot, and when the send window closes on
//! it. Guarantees: "today" and the window are decided by the database
//! clock, never by this replica's; a window closed at that instant claims
//! nothing, and an open one gives the instant the tick stops handing mail
//! to the relay.

use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use tokio::time::Instant;

use super::context::Context;
use super::{TickError, db_err};
use crate::db;
use crate::domain::WindowState;

/// The longest a fire waits for the database clock to reach its slot.
pub const SLOT_WAIT_MAX: Duration = Duration::from_secs(5);

/// When the send window open at `now` (the database clock) closes, as an
/// instant of this process's clock (None: it never does); Err: it is
/// closed, with its next opening, logged.
pub(super) fn window_closes(
    settings: &crate::config::Settings,
    now: DateTime<Utc>,
) -> Result<Option<Instant>, String> {
    let window = settings.send_window();
    if window.always_open() {
        return Ok(None);
    }
    match window.state_at(now) {
        WindowState::Open { closes } => Ok(closes.map(|at| {
            let left = (at - now).to_std().unwrap_or_default();
            Instant::now()
                .checked_add(left)
                .unwrap_or_else(Instant::now)
        })),
        WindowState::Closed { because, opens } => {
            let opens = opens.to_rfc3339();
            tracing::info!(
                because = because.label(),
                %opens,
                timezone = window.timezone.name(),
                "the send window is closed: nothing is claimed until it opens"
            );
            Err(opens)
        }
    }
}

/// When the send window of rows without a zone of their own, closed at
/// `now`, opens (None: it is open, or there is none).
pub(super) fn closed_opening(
    settings: &crate::config::Settings,
    now: DateTime<Utc>,
) -> Option<String> {
    match settings.send_window().state_at(now) {
        WindowState::Closed { opens, .. } => Some(opens.to_rfc3339()),
        WindowState::Open { .. } => None,
    }
}

/// The database's clock and date, read once that clock has reached `slot`
/// (waiting at most [`SLOT_WAIT_MAX`]).
pub(super) async fn today_at(
    ctx: &Context,
    slot: Option<DateTime<Utc>>,
) -> Result<(DateTime<Utc>, NaiveDate), TickError> {
    let tz = ctx.settings.customer_timezone();
    let waited = Instant::now();
    loop {
        let (now, today) = db::clock(&ctx.db, tz)
            .await
            .map_err(db_err("reading the database clock"))?;
        let ahead = slot
            .and_then(|slot| (slot - now).to_std().ok())
            .unwrap_or_default();
        if ahead.is_zero() {
            return Ok((now, today));
        }
        let left = SLOT_WAIT_MAX.saturating_sub(waited.elapsed());
        if left.is_zero() {
            tracing::warn!(
                ahead_ms = ahead.as_millis() as u64,
                "this replica's clock is ahead of the database's by more than {}s; working the database's date",
                SLOT_WAIT_MAX.as_secs()
            );
            return Ok((now, today));
        }
        tokio::time::sleep(ahead.min(left)).await;
    }
}
