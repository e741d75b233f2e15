//! `GET /activity`: every action taken in the console, newest first, from
//! the log each change writes in its own transaction.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use minijinja::context;

use super::App;
use super::failure::{Page, failed};
use super::pages::{self, render};
use super::session::Signed;

/// How many records the page shows.
const SHOWN: i64 = 500;

#[derive(Debug, serde::Serialize)]
struct Line {
    at: String,
    user: String,
    action: String,
    subject: String,
    reason: Option<String>,
    rows: String,
}

pub async fn activity(State(app): State<App>, Extension(signed): Extension<Signed>) -> Page {
    let records = app
        .desk()
        .activity(SHOWN)
        .await
        .map_err(failed("read the activity log"))?;
    let lines: Vec<Line> = records
        .into_iter()
        .map(|a| Line {
            at: pages::when(&app, a.at),
            user: a.user_name,
            action: a.action,
            subject: a.subject,
            reason: a.reason,
            rows: a
                .rows
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        })
        .collect();
    Ok(render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "activity.html",
        context! { title => "Activity", lines => lines },
    ))
}
