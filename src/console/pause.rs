//! `POST /invoices/{id}/pause|unpause` and `POST /customers/{id}/pause|unpause`:
//! an operator holds an invoice (or, in customer mode, every invoice of a
//! customer) back from the tick, or lets it go again, in the worker's own
//! `console_pauses` (the source's pause columns belong to the billing
//! system). Both need a reason; unpausing can send mail, so it also needs
//! the confirmation box (`confirm=yes`). Without them: 422 with the page
//! and a message, nothing changed. The change and its activity record are
//! one transaction (`db::console::pause` / `unpause`).

use axum::Extension;
use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Redirect, Response};

use super::App;
use super::invoices::{customer_page, invoice_page, not_found};
use super::pages;
use super::session::Signed;
use crate::config::GroupBy;
use crate::db;
use crate::db::console::NewActivity;
use crate::db::pauses::Paused;
use crate::domain::InvoiceId;

#[derive(Debug, serde::Deserialize)]
pub struct PauseForm {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: Option<String>,
}

/// Pause or unpause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Pause,
    Unpause,
}

pub async fn pause_invoice(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
    Form(form): Form<PauseForm>,
) -> Response {
    change(&app, &signed, Paused::Invoice(&id), Change::Pause, &form).await
}

pub async fn unpause_invoice(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
    Form(form): Form<PauseForm>,
) -> Response {
    change(&app, &signed, Paused::Invoice(&id), Change::Unpause, &form).await
}

pub async fn pause_customer(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
    Form(form): Form<PauseForm>,
) -> Response {
    change(&app, &signed, Paused::Customer(&id), Change::Pause, &form).await
}

pub async fn unpause_customer(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
    Form(form): Form<PauseForm>,
) -> Response {
    change(&app, &signed, Paused::Customer(&id), Change::Unpause, &form).await
}

/// The page of `what`, with `status` and `notice`.
async fn page(
    app: &App,
    signed: &Signed,
    what: &Paused<'_>,
    status: StatusCode,
    notice: Option<&str>,
) -> Response {
    match what {
        Paused::Invoice(id) => invoice_page(app, signed, id, status, notice).await,
        Paused::Customer(id) => customer_page(app, signed, id, status, notice).await,
    }
}

/// Whether the source knows `what`; the answer to give when it does not.
async fn known(app: &App, signed: &Signed, what: &Paused<'_>) -> Result<(), Response> {
    let found = match what {
        Paused::Invoice(id) => db::explain::source_rows(
            &app.db,
            &[InvoiceId::from(*id)],
            chrono::Utc::now().date_naive(),
        )
        .await
        .map(|rows| !rows.is_empty()),
        Paused::Customer(id) => {
            if app.settings.reminders.group_by != GroupBy::Customer {
                Ok(false)
            } else {
                db::explain::customer_invoices(&app.db, id, 1)
                    .await
                    .map(|keys| !keys.is_empty())
            }
        }
    };
    match found {
        Ok(true) => Ok(()),
        Ok(false) => {
            let name = match what {
                Paused::Invoice(id) => format!("Invoice {id}"),
                Paused::Customer(id) => format!("Customer {id}"),
            };
            Err(not_found(app, signed, name))
        }
        Err(e) => Err(pages::failed(app, "read the billing source", &e)),
    }
}

async fn change(
    app: &App,
    signed: &Signed,
    what: Paused<'_>,
    change: Change,
    form: &PauseForm,
) -> Response {
    if let Err(answer) = known(app, signed, &what).await {
        return answer;
    }
    let reason = crate::domain::sanitize(&form.reason, 500);
    if reason.is_empty() {
        let why = "Give a reason: it goes in the activity log. Nothing was changed.";
        return page(
            app,
            signed,
            &what,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(why),
        )
        .await;
    }
    if change == Change::Unpause && form.confirm.as_deref() != Some("yes") {
        let why = "Unpausing can mail the customer at the next tick: tick the box that confirms it. Nothing was changed.";
        return page(
            app,
            signed,
            &what,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(why),
        )
        .await;
    }
    let subject = what.subject();
    let activity = NewActivity {
        user_name: &signed.user,
        action: match change {
            Change::Pause => "pause",
            Change::Unpause => "unpause",
        },
        subject: &subject,
        reason: Some(&reason),
    };
    let done = match change {
        Change::Pause => db::console::pause(&app.db, &what, &activity).await,
        Change::Unpause => db::console::unpause(&app.db, &what, &activity)
            .await
            .map(|_| ()),
    };
    if let Err(e) = done {
        return pages::failed(app, "change the pause", &e);
    }
    let path = match what {
        Paused::Invoice(id) => format!("/invoices/{}", pages::segment(id)),
        Paused::Customer(id) => format!("/customers/{}", pages::segment(id)),
    };
    Redirect::to(&app.path(&path)).into_response()
}
