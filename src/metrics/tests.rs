//! The metrics' names as the exposition shows them.

use super::*;

#[test]
fn the_contract_names_are_exposed() {
    let m = Metrics::default();
    m.tick_ended("done");
    let counts = Counts {
        sent: 3,
        ..Counts::default()
    };
    m.tick_worked(&counts, Duration::from_millis(5), true);
    m.set_lock_held(true);
    let text = m.encode().unwrap_or_default();
    for needle in [
        "invoice_reminder_ticks_total{outcome=\"done\"} 1",
        "invoice_reminder_reminders_total{result=\"sent\"} 3",
        "invoice_reminder_tick_duration_seconds_count 1",
        "invoice_reminder_lock_held 1",
        "invoice_reminder_last_success_timestamp_seconds ",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}
