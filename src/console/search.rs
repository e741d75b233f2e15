//! `GET /search?q=...`: the invoices whose id, number, customer id
//! (customer mode) or address is the query (`operator::search`).
//! Exactly one: 303 to its page; several: a list (at most [`LIMIT`]);
//! none: a page saying so, the query shown escaped.

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Redirect};
use minijinja::context;

use super::App;
use super::failure::{Page, failed};
use super::pages::{self, render};
use super::session::Signed;

/// How many invoices a search lists at most.
pub const LIMIT: i64 = 50;

#[derive(Debug, serde::Deserialize)]
pub struct Search {
    #[serde(default)]
    q: String,
}

pub async fn search(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Query(search): Query<Search>,
) -> Page {
    let q = search.q.trim();
    let found = if q.is_empty() {
        Vec::new()
    } else {
        app.desk()
            .search(q, LIMIT)
            .await
            .map_err(failed("search"))?
    };
    if let [one] = found.as_slice() {
        let path = format!("/invoices/{}", pages::segment(&one.invoice_id));
        return Ok(Redirect::to(&app.path(&path)).into_response());
    }
    let full = i64::try_from(found.len()).unwrap_or(i64::MAX) >= LIMIT;
    Ok(render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "search.html",
        context! { title => "Search", q, found, full, limit => LIMIT },
    ))
}
