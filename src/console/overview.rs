//! `GET /`: today at a glance, in the numbers `status` and `audit` give:
//! sent today, unknown deliveries, failed with attempts left, given up,
//! suppressed addresses, source problems. Each number sits in an element
//! with its `data-count` name, which the browser tests compare with the
//! database.

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;

use super::App;
use super::pages::{self, render};
use super::session::Signed;
use crate::commands;
use crate::db;

/// A `sending` row counts as unknown after this, as `audit` counts it by
/// default (its `--unknown-after`).
pub const UNKNOWN_AFTER: Duration = Duration::from_secs(10 * 60);

#[derive(Debug, serde::Serialize)]
struct Count {
    key: &'static str,
    label: &'static str,
    value: i64,
    link: Option<&'static str>,
}

pub async fn overview(State(app): State<App>, Extension(signed): Extension<Signed>) -> Response {
    let report = match commands::build_report(&app.db, &app.settings, UNKNOWN_AFTER).await {
        Ok(r) => r,
        Err(e) => return pages::failed(&app, "read the reminders", e.as_ref()),
    };
    let tz = app.settings.schedule.timezone;
    let (sent_today, suppressed) =
        match db::console::overview_counts(&app.db, report.today, tz.name()).await {
            Ok(c) => c,
            Err(e) => return pages::failed(&app, "count today's mail", &e),
        };
    let status = |s: &str| report.counts.get(s).copied().unwrap_or(0);
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
            value: wide(report.unknown.len()),
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
            key: "problems",
            label: "source problems",
            value: wide(report.source_problems_count),
            link: None,
        },
    ];
    render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "overview.html",
        context! {
            title => "Today",
            today => report.today.to_string(),
            counts => counts,
            owed_new => report.missing_count,
            sent_by_step => report.sent_by_step,
            by_status => report.counts,
        },
    )
}
