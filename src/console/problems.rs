//! `GET /problems`: the source problems `audit` and `check-source` list,
//! found by the same bounded survey (`operator::survey`), each with the
//! row rule it broke (`Problem::rule`, the words of docs/own-invoices.md)
//! and what to do about it (the CLI's words, `FIX_HINT`).

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use minijinja::context;

use super::App;
use super::failure::{Page, failed};
use super::pages::render;
use super::session::Signed;
use crate::operator::survey::FIX_HINT;

#[derive(Debug, serde::Serialize)]
struct Row {
    invoice: String,
    number: Option<String>,
    problem: &'static str,
    rule: &'static str,
    detail: String,
}

pub async fn list(State(app): State<App>, Extension(signed): Extension<Signed>) -> Page {
    let problems = app
        .desk()
        .survey()
        .await
        .map_err(failed("check the source rows"))?
        .problems;
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
    let rates = app
        .desk()
        .rates_out_of_date()
        .await
        .map_err(failed("read the database clock"))?;
    // The CLI's words, as a sentence of their own.
    let mut hint = FIX_HINT.to_owned();
    if let Some(first) = hint.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    Ok(render(
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
            rates => rates,
        },
    ))
}
