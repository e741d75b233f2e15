//! `explain`'s text for a reader: the source row, the steps, each reminder
//! row with its times and Message-ID, suppressions, the reason and the next
//! step, in the words `docs/operating.md` shows.

use chrono::NaiveDate;

use crate::operator::explain::instant;
use crate::operator::explain::report::{self, Explained, Until};

/// The explanation for a reader.
pub(super) fn print_text(e: &Explained) -> std::io::Result<()> {
    let or_none = |d: Option<NaiveDate>| d.map_or_else(|| "-".to_owned(), |d| d.to_string());
    outln!(
        "invoice {} on {} ({}, database clock)",
        e.invoice_id,
        e.today,
        e.timezone
    );
    match (&e.source, e.source_rows) {
        (Some(s), _) => {
            outln!(
                "  source: number {}, {} <{}>, due {}, is_paid {}, paused {}, paused_until {}",
                s.invoice_number.as_deref().unwrap_or("-"),
                s.customer_name.as_deref().unwrap_or("-"),
                s.email.as_deref().unwrap_or("-"),
                or_none(s.due_date),
                flag(s.is_paid),
                flag(s.paused),
                or_none(s.paused_until)
            );
        }
        (None, 0) => outln!("  source: no row with this invoice_id"),
        (None, n) => outln!("  source: {n} rows with this invoice_id"),
    }
    if let (Some(due), Some(days)) = (e.due_date, e.days_overdue) {
        outln!(
            "  due date {due}, {}; due step today: {}",
            report::due_in_words(days),
            e.due_step_today.as_ref().map_or("none", |k| k.as_str())
        );
        let steps: Vec<String> = e
            .stages
            .iter()
            .map(|o| format!("{} {}", o.name, o.date))
            .collect();
        outln!("  steps: {}", steps.join(", "));
    }
    if e.reminders.is_empty() {
        outln!("  reminders: none");
    } else {
        outln!("  reminders:");
    }
    for v in &e.reminders {
        let r = &v.row;
        let state = serde_json::to_value(v.state)
            .ok()
            .and_then(|s| s.as_str().map(str::to_owned))
            .unwrap_or_default();
        let times = [
            ("claimed", Some(r.claimed_at)),
            ("started", r.started_at),
            ("last attempt", r.last_attempt_at),
            ("sent", r.sent_at),
        ]
        .into_iter()
        .filter_map(|(what, t)| t.map(|t| format!("{what} {}", instant(t))))
        .collect::<Vec<_>>()
        .join(", ");
        let run = match (r.run_id, &r.replica) {
            (Some(id), Some(replica)) => format!("run {id} ({replica})"),
            (Some(id), None) => format!("run {id}"),
            (None, _) => "no run".to_owned(),
        };
        outln!(
            "    {} {} ({state}), {}, {times}, {run}{}{}",
            r.step,
            r.status,
            report::count(r.attempts, "attempt"),
            r.message_id
                .as_deref()
                .map(|m| format!(", Message-ID <{m}>"))
                .unwrap_or_default(),
            r.last_error
                .as_deref()
                .map(|m| format!(", last error: {m}"))
                .unwrap_or_default()
        );
        if let (Some(reply), Some(sha256)) = (&r.smtp_reply, &r.message_sha256) {
            outln!("      server's reply: {reply}; SHA-256 of the bytes sent: {sha256}");
        }
    }
    for s in &e.suppressed {
        outln!(
            "  suppressed: {} ({}, from {}, since {})",
            s.address,
            s.reason,
            s.source,
            instant(s.suppressed_at)
        );
    }
    for h in &e.payment_holds {
        outln!(
            "  payment {}: {} ({}), {} event {} at {}{}",
            if h.object_id.is_empty() {
                "signal"
            } else {
                &h.object_id
            },
            h.state,
            report::hold_state_words(&h.state),
            h.provider,
            h.event_id,
            instant(h.event_at),
            match h.state.as_str() {
                "booked" => format!(", ended {}", instant(h.changed_at)),
                "lifted" => format!(
                    ", lifted by {} {}",
                    h.lifted_by.as_deref().unwrap_or("an operator"),
                    instant(h.changed_at)
                ),
                _ => String::new(),
            }
        );
    }
    for line in &e.late_payment_working {
        outln!("  {line}");
    }
    let until = match e.until {
        Some(Until::Date(d)) => format!(" {d}"),
        Some(Until::Time(t)) => format!(" {}", instant(t)),
        None => String::new(),
    };
    outln!("  reason: {}{until}: {}", e.reason.label(), e.reason_detail);
    match (&e.next_step, e.next_date) {
        (Some(step), Some(date)) => outln!("  next: {step} on {date}"),
        _ => outln!("  next: none"),
    }
    Ok(())
}

fn flag(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "true",
        Some(false) => "false",
        None => "NULL",
    }
}
