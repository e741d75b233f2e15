//! `GET /problems`: the source problems `audit` and `check-source` list,
//! found by the same bounded survey (`commands::survey`), each with the
//! row rule it broke (`Problem::rule`, the words of docs/own-invoices.md)
//! and what to do about it (the CLI's words, `commands::FIX_HINT`).

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

#[derive(Debug, serde::Serialize)]
struct Row {
    invoice: String,
    number: Option<String>,
    problem: &'static str,
    rule: &'static str,
    detail: String,
}

pub async fn list(State(app): State<App>, Extension(signed): Extension<Signed>) -> Response {
    let today = match db::today(&app.db, app.settings.schedule.timezone).await {
        Ok(t) => t,
        Err(e) => return pages::failed(&app, "read the database clock", &e),
    };
    let problems = match commands::survey(&app.db, &app.settings, today).await {
        Ok(s) => s.problems,
        Err(e) => return pages::failed(&app, "check the source rows", &e),
    };
    let rows: Vec<Row> = problems
        .listed
        .iter()
        .map(|p| Row {
            invoice: p
                .invoice_id
                .as_ref()
                .map_or_else(|| "NULL".to_owned(), ToString::to_string),
            number: p.invoice_number.clone(),
            problem: p.problem.label(),
            rule: crate::problems::rule(p.problem),
            detail: p.detail.clone(),
        })
        .collect();
    let more = problems.count.saturating_sub(rows.len());
    // The CLI's words, as a sentence of their own.
    let mut hint = commands::FIX_HINT.to_owned();
    if let Some(first) = hint.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "problems.html",
        context! {
            title => "Source problems",
            headline => problems.headline(),
            count => problems.count,
            rows => rows,
            more => more,
            hint => hint,
            relation => app.settings.source.relation.to_string(),
        },
    )
}
