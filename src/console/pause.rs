//! `POST /invoices/{id}/pause|unpause` and `POST /customers/{id}/pause|unpause`:
//! one handler for the four routes, which reads what and how from the
//! route it answers. The decision is `operator::pause::change`: a refused
//! change (no reason, an unpause not confirmed) answers 422 with the page
//! and its message, an unknown invoice or customer 404, nothing changed;
//! a change answers 303 to the page. `POST /invoices/{id}/lift` lifts a
//! payment signal's hold the same way.

use axum::Extension;
use axum::extract::{Form, Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse as _, Redirect};

use super::App;
use super::failure::{Failure, Page, failed};
use super::invoices::{customer_page, invoice_page};
use super::pages;
use super::session::Signed;
use crate::domain::InvoiceId;
use crate::operator::holds;
use crate::operator::pause::{Change, Outcome, Paused, change};

#[derive(Debug, serde::Deserialize)]
pub struct PauseForm {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: Option<String>,
}

/// The four routes' handler.
pub async fn post(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    route: Uri,
    Path(id): Path<String>,
    Form(form): Form<PauseForm>,
) -> Page {
    // The path within the console (a base path is stripped by nesting).
    let route = route.path();
    let what = if route.starts_with("/customers/") {
        Paused::Customer(&id)
    } else {
        Paused::Invoice(&id)
    };
    let how = if route.ends_with("/unpause") {
        Change::Unpause
    } else {
        Change::Pause
    };
    let confirmed = form.confirm.as_deref() == Some("yes");
    let outcome = change(
        &app.desk(),
        &what,
        how,
        &form.reason,
        confirmed,
        &signed.user,
    )
    .await
    .map_err(failed("change the pause"))?;
    if let Some(why) = outcome.refusal() {
        return page(&app, &signed, &what, StatusCode::UNPROCESSABLE_ENTITY, why).await;
    }
    let path = match what {
        Paused::Invoice(id) if outcome == Outcome::Done => {
            format!("/invoices/{}", pages::segment(id))
        }
        Paused::Customer(id) if outcome == Outcome::Done => {
            format!("/customers/{}", pages::segment(id))
        }
        Paused::Invoice(id) => return Err(Failure::NotFound(format!("Invoice {id}"))),
        Paused::Customer(id) => return Err(Failure::NotFound(format!("Customer {id}"))),
    };
    Ok(Redirect::to(&app.path(&path)).into_response())
}

/// `POST /invoices/{id}/lift`: lifts the payment signal's hold
/// (`operator::holds::lift`); the same refusals as an unpause, and 409
/// when nothing holds the invoice any more.
pub async fn lift(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
    Form(form): Form<PauseForm>,
) -> Page {
    let confirmed = form.confirm.as_deref() == Some("yes");
    let key = InvoiceId::from(id.as_str());
    let outcome = holds::lift(&app.desk(), &key, &form.reason, confirmed, &signed.user)
        .await
        .map_err(failed("lift the payment hold"))?;
    let what = Paused::Invoice(&id);
    if let Some(why) = outcome.refusal() {
        return page(&app, &signed, &what, StatusCode::UNPROCESSABLE_ENTITY, why).await;
    }
    if outcome == Outcome::Unknown {
        return Err(Failure::Refused {
            status: StatusCode::CONFLICT,
            lines: vec![format!(
                "No payment signal holds invoice {id} now: it was lifted, released or expired meanwhile. Nothing was changed."
            )],
            back: None,
        });
    }
    let path = format!("/invoices/{}", pages::segment(&id));
    Ok(Redirect::to(&app.path(&path)).into_response())
}

/// The page of `what`, with `status` and `notice`.
async fn page(
    app: &App,
    signed: &Signed,
    what: &Paused<'_>,
    status: StatusCode,
    notice: &str,
) -> Page {
    match what {
        Paused::Invoice(id) => invoice_page(app, signed, id, status, Some(notice)).await,
        Paused::Customer(id) => customer_page(app, signed, id, status, Some(notice)).await,
    }
}
