//! `GET /suppressions`: the list, newest first; `POST /suppressions` adds
//! an address (or replaces its reason), `POST /suppressions/remove` takes
//! one off, as `suppress add|remove` do (`operator::suppress`), each with
//! its activity record in the same transaction.

use axum::Extension;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Redirect};
use minijinja::context;

use super::App;
use super::failure::{Failure, Page, failed};
use super::pages::{self, render};
use super::session::Signed;
use crate::operator::Actor;
use crate::operator::suppress::{self, checked, reason};

#[derive(Debug, serde::Serialize)]
struct Entry {
    address: String,
    reason: String,
    source: String,
    detail: Option<String>,
    at: String,
}

pub async fn list(State(app): State<App>, Extension(signed): Extension<Signed>) -> Page {
    let list = app
        .desk()
        .suppressions()
        .await
        .map_err(failed("read the suppression list"))?;
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
    Ok(render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "suppressions.html",
        context! { title => "Suppressions", entries => entries },
    ))
}

#[derive(Debug, serde::Deserialize)]
pub struct Address {
    address: String,
    #[serde(default)]
    reason: String,
}

/// `form`'s address, checked, or the page that says why it is not one.
fn address_of(form: &Address) -> Result<suppress::Address, Failure> {
    checked(&form.address).map_err(|e| Failure::Refused {
        status: StatusCode::BAD_REQUEST,
        lines: vec![e.to_string()],
        back: Some("/suppressions"),
    })
}

pub async fn add(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Form(form): Form<Address>,
) -> Page {
    let address = address_of(&form)?;
    let reason = reason(Some(&form.reason));
    suppress::add(&app.desk(), &address, &reason, Actor::Console(&signed.user))
        .await
        .map_err(failed("add to the suppression list"))?;
    Ok(Redirect::to(&app.path("/suppressions")).into_response())
}

pub async fn remove(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Form(form): Form<Address>,
) -> Page {
    let address = address_of(&form)?;
    suppress::remove(&app.desk(), &address, Actor::Console(&signed.user))
        .await
        .map_err(failed("remove from the suppression list"))?;
    Ok(Redirect::to(&app.path("/suppressions")).into_response())
}
