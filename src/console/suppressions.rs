//! `GET /suppressions`: the list, newest first; `POST /suppressions` adds
//! an address (or replaces its reason), `POST /suppressions/remove` takes
//! one off, as `suppress add|remove` do (the same address check and
//! statements), each with its activity record in the same transaction.

use axum::Extension;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Redirect, Response};
use minijinja::context;

use super::App;
use super::pages::{self, render};
use super::session::Signed;
use crate::commands::suppress::{DEFAULT_REASON, checked};
use crate::db;
use crate::db::console::NewActivity;
use crate::db::suppressions::NewSuppression;

#[derive(Debug, serde::Serialize)]
struct Entry {
    address: String,
    reason: String,
    source: String,
    detail: Option<String>,
    at: String,
}

pub async fn list(State(app): State<App>, Extension(signed): Extension<Signed>) -> Response {
    let list = match db::suppressions::list(&app.db).await {
        Ok(l) => l,
        Err(e) => return pages::failed(&app, "read the suppression list", &e),
    };
    let entries: Vec<Entry> = list
        .into_iter()
        .map(|s| Entry {
            at: pages::when(&app, s.suppressed_at),
            address: s.address,
            reason: s.reason,
            source: s.source,
            detail: s.detail,
        })
        .collect();
    render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "suppressions.html",
        context! { title => "Suppressions", entries => entries },
    )
}

#[derive(Debug, serde::Deserialize)]
pub struct Address {
    address: String,
    #[serde(default)]
    reason: String,
}

fn not_an_address(app: &App, signed: &Signed, why: &str) -> Response {
    render(
        app,
        Some(signed),
        StatusCode::BAD_REQUEST,
        "message.html",
        context! { title => "Not done", message => why, back => "/suppressions" },
    )
}

pub async fn add(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Form(form): Form<Address>,
) -> Response {
    let address = match checked(&form.address) {
        Ok(a) => a,
        Err(e) => return not_an_address(&app, &signed, &e.to_string()),
    };
    let reason = crate::domain::sanitize(&form.reason, 500);
    let reason = if reason.is_empty() {
        DEFAULT_REASON.to_owned()
    } else {
        reason
    };
    let entry = NewSuppression {
        address: &address,
        reason: &reason,
        source: "console",
        detail: None,
    };
    let activity = NewActivity {
        user_name: &signed.user,
        action: "suppress",
        subject: &address,
        reason: Some(&reason),
    };
    match db::console::suppress(&app.db, entry, &activity).await {
        Ok(_) => Redirect::to(&app.path("/suppressions")).into_response(),
        Err(e) => pages::failed(&app, "add to the suppression list", &e),
    }
}

pub async fn remove(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Form(form): Form<Address>,
) -> Response {
    let address = match checked(&form.address) {
        Ok(a) => a,
        Err(e) => return not_an_address(&app, &signed, &e.to_string()),
    };
    let activity = NewActivity {
        user_name: &signed.user,
        action: "unsuppress",
        subject: &address,
        reason: None,
    };
    match db::console::unsuppress(&app.db, &address, &activity).await {
        Ok(_) => Redirect::to(&app.path("/suppressions")).into_response(),
        Err(e) => pages::failed(&app, "remove from the suppression list", &e),
    }
}
