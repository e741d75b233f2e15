//! `GET /unknown`: unknown deliveries by mail (a statement's rows share
//! one Message-ID), each with a form to settle it; `POST /unknown/settle`
//! settles the whole mail exactly as `settle` does (`operator::settle`),
//! with its activity record in the same transaction.
//! "Resend" can send mail, so it needs the confirmation box ticked.

use axum::Extension;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use minijinja::context;

use super::App;
use super::failure::{Failure, Page, failed};
use super::pages::{self, render};
use super::session::Signed;
use crate::operator::Actor;
use crate::operator::settle::{self as settling, Named, Settlement};
use crate::operator::unknown::UNKNOWN_AFTER;

#[derive(Debug, serde::Serialize)]
struct Mail {
    message_id: Option<String>,
    reminders: String,
    invoices: Vec<String>,
    steps: String,
    claimed: String,
    replica: Option<String>,
    error: Option<String>,
}

pub async fn list(State(app): State<App>, Extension(signed): Extension<Signed>) -> Page {
    let unknown = app
        .desk()
        .unknown(UNKNOWN_AFTER)
        .await
        .map_err(failed("read the unknown deliveries"))?;
    let mails: Vec<Mail> = unknown
        .mails
        .into_iter()
        .map(|m| Mail {
            message_id: m.message_id,
            reminders: join(&m.reminder_ids),
            invoices: m.invoice_ids.iter().map(ToString::to_string).collect(),
            steps: join(&m.steps),
            claimed: pages::when(&app, m.claimed_at),
            replica: m.replica_id,
            error: m.last_error,
        })
        .collect();
    Ok(render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "unknown.html",
        context! { title => "Unknown deliveries", mails => mails },
    ))
}

fn join<T: std::fmt::Display>(values: &[T]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Debug, serde::Deserialize)]
pub struct Settle {
    message_id: String,
    action: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: Option<String>,
}

pub async fn settle(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Form(form): Form<Settle>,
) -> Page {
    let not_done = |status, why: &str| Failure::Refused {
        status,
        lines: vec![why.to_owned()],
        back: Some("/unknown"),
    };
    let settlement = match form.action.as_str() {
        "sent" => Settlement::Sent,
        "resend" => Settlement::Resend,
        _ => return Err(not_done(StatusCode::BAD_REQUEST, "Choose sent or resend.")),
    };
    if settlement == Settlement::Resend && form.confirm.as_deref() != Some("yes") {
        return Err(not_done(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Resending mails the customer again: tick the box that confirms the mail server's log shows this Message-ID did not go out.",
        ));
    }
    let named = Named::Message(form.message_id.clone());
    let settled = settling::settle(
        &app.desk(),
        &named,
        settlement,
        Actor::Console(&signed.user),
        Some(form.reason.trim()),
    )
    .await
    .map_err(failed("settle the delivery"))?;
    if !settled.found {
        return Err(not_done(
            StatusCode::NOT_FOUND,
            &format!(
                "No unknown delivery has Message-ID <{}>: it was settled meanwhile.",
                form.message_id
            ),
        ));
    }
    let (status, title) = if settled.refused == 0 {
        (StatusCode::OK, "Settled")
    } else {
        (StatusCode::CONFLICT, "Partly settled")
    };
    Ok(render(
        &app,
        Some(&signed),
        status,
        "message.html",
        context! { title, lines => settled.notes, back => "/unknown" },
    ))
}
