//! `GET /`: today at a glance, in the numbers `status` and `audit` give,
//! read by the same functions: owed today by step (`db::owed`, the
//! conditions of `db::owing`), sent today, unknown deliveries, failed with
//! attempts left, given up, suppressed addresses, source problems (the
//! survey `audit` and `check-source` run), the next tick (`schedule`, as
//! `next` computes it) and who holds the lock (as `status` reads it). Each
//! number sits in an element with its `data-count` name, which the
//! browser tests compare with the database. Beneath them, the last
//! [`chart::DAYS`] days by outcome, as server-rendered SVG. What is owed
//! and the chart are read at most every [`super::kept::MAX_AGE`]; the rest
//! at every request.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use minijinja::context;

use super::App;
use super::chart;
use super::failure::{Page, failed};
use super::pages::{render, when};
use super::session::Signed;
use crate::lock::Holder;
use crate::operator::desk::Desk;
use crate::operator::lock_holder::lock_holder;
use crate::operator::unknown::UNKNOWN_AFTER;

#[derive(Debug, serde::Serialize)]
struct Count {
    key: &'static str,
    label: &'static str,
    value: i64,
    link: Option<&'static str>,
}

pub async fn overview(State(app): State<App>, Extension(signed): Extension<Signed>) -> Page {
    let settings = &app.settings;
    let desk = app.desk();
    let today = desk
        .today()
        .await
        .map_err(failed("read the database clock"))?;
    let kept = app
        .kept
        .today(&desk)
        .await
        .map_err(failed("read the invoices that owe a reminder"))?;
    let owed = &kept.owed;
    let open = desk
        .open_counts()
        .await
        .map_err(failed("count the reminders"))?;
    let unknown = desk
        .unknown(UNKNOWN_AFTER)
        .await
        .map_err(failed("read the unknown deliveries"))?
        .rows;
    let (sent_today, suppressed) = desk
        .sent_today_and_suppressed()
        .await
        .map_err(failed("count today's mail"))?;
    let held = desk
        .holds()
        .await
        .map_err(failed("count the payment holds"))?;
    let holder = match lock_holder(&desk, &app.lock).await {
        Ok(h) => holder_text(h.as_ref()),
        Err(e) => {
            tracing::warn!(error = %e, "the console could not read the lock");
            format!("unknown (the lock could not be read: {e})")
        }
    };
    let relay = relay_text(&app, &desk).await;
    let next_tick = crate::schedule::next_fires(&settings.schedule, chrono::Utc::now(), 1)
        .first()
        .map_or_else(
            || "none (the schedule does not fire again)".to_owned(),
            |t| when(&app, t.with_timezone(&chrono::Utc)),
        );
    let status = |s: &str| open.get(s).copied().unwrap_or(0);
    let wide = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let counts = [
        Count {
            key: "sent_today",
            label: "sent today",
            value: sent_today,
            link: None,
        },
        Count {
            key: "unknown",
            label: "unknown deliveries",
            value: wide(unknown.len()),
            link: Some("/unknown"),
        },
        Count {
            key: "failed",
            label: "failed, attempts left",
            value: status("failed"),
            link: None,
        },
        Count {
            key: "given_up",
            label: "given up",
            value: status("discarded"),
            link: None,
        },
        Count {
            key: "suppressed",
            label: "suppressed addresses",
            value: suppressed,
            link: Some("/suppressions"),
        },
        Count {
            key: "held",
            label: "held by payment signals",
            value: held.total(),
            link: None,
        },
        Count {
            key: "unlinked",
            label: "payment signals naming no invoice yet (7 days)",
            value: held.unlinked,
            link: None,
        },
        Count {
            key: "problems",
            label: "source problems",
            value: wide(owed.problems),
            link: Some("/problems"),
        },
    ];
    Ok(render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "overview.html",
        context! {
            title => "Today",
            today => today.to_string(),
            counts => counts,
            owed_new => owed.new,
            by_step => owed.by_step,
            problems_bounded => owed.headline,
            read_at => when(&app, kept.read_at),
            max_age => super::kept::MAX_AGE.as_secs(),
            next_tick => next_tick,
            lock => app.lock.describe(),
            holder => holder,
            relay => relay,
            chart => chart::Chart::new(today, &kept.days),
        },
    ))
}

/// The relay's rate as the pacer left it: "no limit", or the rate sends
/// are paced at, what the relay was measured to take, and its last throttle
/// (docs/operating.md, "A relay that throttles").
async fn relay_text(app: &App, desk: &Desk) -> String {
    match desk.relay_rate().await {
        Ok(Some((Some(held), measured, throttled_at))) => format!(
            "paced at {held:.2} a second{}{}",
            measured.map_or_else(String::new, |m| format!(
                ", the relay took {m:.2} a second between its last throttles"
            )),
            throttled_at.map_or_else(String::new, |t| format!(
                ", last throttled {}",
                when(app, t)
            ))
        ),
        Ok(Some((None, _, Some(t)))) => format!("no limit (last throttled {})", when(app, t)),
        Ok(_) => "no limit (it never throttled us)".to_owned(),
        Err(e) => format!("unknown (the rate could not be read: {e})"),
    }
}

/// "nobody", or the holder as `status` names it.
fn holder_text(holder: Option<&Holder>) -> String {
    let Some(h) = holder else {
        return "nobody".to_owned();
    };
    let mut details = Vec::new();
    if let Some(pid) = h.pid {
        details.push(format!("backend pid {pid}"));
    }
    if let Some(ms) = h.ttl_left_ms {
        details.push(format!("{ms} ms left"));
    }
    let who = h.replica_id.as_deref().unwrap_or("an unknown replica");
    if details.is_empty() {
        who.to_owned()
    } else {
        format!("{who} ({})", details.join(", "))
    }
}
