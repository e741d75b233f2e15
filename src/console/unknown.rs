//! `GET /unknown`: unknown deliveries by mail (a statement's rows share
//! one Message-ID), each with a form to settle it; `POST /unknown/resolve`
//! settles the whole mail exactly as `resolve` does (the same plan, the
//! same statements), with its activity record in the same transaction.
//! "Resend" can send mail, so it needs the confirmation box ticked.

use axum::Extension;
use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;

use super::App;
use super::overview::UNKNOWN_AFTER;
use super::pages::{self, render};
use super::session::Signed;
use crate::commands::{self, resolve as decide};
use crate::db;
use crate::db::console::{NewActivity, Verdict};
use crate::db::owing::Today;
use crate::domain::ReminderId;

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

pub async fn list(State(app): State<App>, Extension(signed): Extension<Signed>) -> Response {
    let rows = match db::audit::unknown(&app.db, UNKNOWN_AFTER.as_secs_f64()).await {
        Ok(r) => r,
        Err(e) => return pages::failed(&app, "read the unknown deliveries", &e),
    };
    let mails: Vec<Mail> = commands::unknown_mails(&rows)
        .into_iter()
        .map(|m| Mail {
            message_id: m.message_id,
            reminders: join(&m.reminder_ids),
            invoices: m.invoice_ids.iter().map(ToString::to_string).collect(),
            steps: join(&m.periods),
            claimed: pages::when(&app, m.claimed_at),
            replica: m.replica_id,
            error: m.last_error,
        })
        .collect();
    render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "unknown.html",
        context! { title => "Unknown deliveries", mails => mails },
    )
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

pub async fn resolve(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Form(form): Form<Settle>,
) -> Response {
    let say = |status, title: &str, lines: Vec<String>| {
        render(
            &app,
            Some(&signed),
            status,
            "message.html",
            context! { title, lines, back => "/unknown" },
        )
    };
    let verdict = match form.action.as_str() {
        "sent" => Verdict::Sent,
        "resend" => Verdict::Resend,
        _ => {
            return say(
                StatusCode::BAD_REQUEST,
                "Not done",
                vec!["Choose sent or resend.".into()],
            );
        }
    };
    if verdict == Verdict::Resend && form.confirm.as_deref() != Some("yes") {
        return say(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Not done",
            vec!["Resending mails the customer again: tick the box that confirms the mail server's log shows this Message-ID did not go out.".into()],
        );
    }
    let unknown = match db::audit::unknown(&app.db, UNKNOWN_AFTER.as_secs_f64()).await {
        Ok(r) => r,
        Err(e) => return pages::failed(&app, "read the unknown deliveries", &e),
    };
    let named: Vec<ReminderId> = unknown
        .iter()
        .filter(|r| r.message_id.as_deref() == Some(form.message_id.as_str()))
        .map(|r| ReminderId(r.reminder_id))
        .collect();
    if named.is_empty() {
        return say(
            StatusCode::NOT_FOUND,
            "Not done",
            vec![format!(
                "No unknown delivery has Message-ID <{}>: it was settled meanwhile.",
                form.message_id
            )],
        );
    }
    let tz = app.settings.schedule.timezone;
    let rows = match db::today(&app.db, tz).await {
        Ok(date) => {
            db::resolve::named_rows(&app.db, &named, &Today::from_settings(&app.settings, date))
                .await
        }
        Err(e) => Err(e),
    };
    let rows = match rows {
        Ok(r) => r,
        Err(e) => return pages::failed(&app, "read the reminders", &e),
    };
    let resending = verdict == Verdict::Resend;
    let plan = decide::plan(&rows, resending);
    let ids: Vec<ReminderId> = plan.eligible.iter().copied().collect();
    let reason = form.reason.trim();
    let subject = format!("Message-ID <{}>", form.message_id);
    let activity = NewActivity {
        user_name: &signed.user,
        action: if resending { "resend" } else { "resolve sent" },
        subject: &subject,
        reason: (!reason.is_empty()).then_some(reason),
    };
    let changed = match db::console::settle_unknown(&app.db, &ids, verdict, &activity).await {
        Ok(c) => c,
        Err(e) => return pages::failed(&app, "settle the delivery", &e),
    };
    let done = decide::settled(&rows, &plan, &changed, resending);
    let refused = plan.refused + done.refused;
    let mut lines = plan.notes;
    lines.extend(done.notes);
    let (status, title) = if refused == 0 {
        (StatusCode::OK, "Settled")
    } else {
        (StatusCode::CONFLICT, "Partly settled")
    };
    say(status, title, lines)
}
