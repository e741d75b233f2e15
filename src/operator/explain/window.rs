//! The send window's word on an explanation: an invoice that would go
//! today waits while its customer's window is closed, and says why (the
//! day or the hours) and when it opens, on the customer's clock, as the
//! tick decides it (`tick::window_closes`).

use chrono::{DateTime, Datelike, Utc, Weekday};

use super::{Explained, Reason, Until};
use crate::domain::{ClosedBecause, SendWindow, WindowState};

/// `e` at `now` (the database clock) under `window`.
pub(super) fn apply(e: &mut Explained, window: &SendWindow, now: DateTime<Utc>) {
    e.timezone = window.timezone.name().to_owned();
    e.calendar = window.open.holidays().map(|h| h.name().to_owned());
    if e.reason != Reason::WillSendToday || window.always_open() {
        return;
    }
    let WindowState::Closed { because, opens } = window.state_at(now) else {
        return;
    };
    let local = now.with_timezone(&window.timezone);
    let why = match because {
        ClosedBecause::Day if matches!(local.weekday(), Weekday::Sat | Weekday::Sun) => {
            "weekend".to_owned()
        }
        ClosedBecause::Day => format!("{} is not a sending day", local.format("%a")),
        ClosedBecause::Hours => format!("outside {}", window.hours),
        ClosedBecause::Holiday => format!(
            "a holiday in {}",
            window.open.holidays().map_or("its calendar", |h| h.name())
        ),
    };
    e.reason = Reason::WaitingForSendWindow;
    e.reason_detail = format!(
        "waiting for the send window: opens {} {} ({why})",
        opens.format("%a %Y-%m-%d %H:%M"),
        window.timezone.name()
    );
    e.until = Some(Until::Time(opens.with_timezone(&Utc)));
    if e.next_date.is_some() {
        e.next_date = Some(opens.date_naive());
    }
    e.window_closed_because = Some(because.label());
    e.window_opens = Some(opens.to_rfc3339());
}
