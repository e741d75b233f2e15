//! `GET /preview`: each step's reminder in each locale, about the sample
//! invoice the templates are checked against, built by `preview`'s code
//! (`commands::preview::samples`, which composes as the tick does). The
//! text part is shown as text; the HTML part in a frame served by
//! `GET /preview/frame`, which answers with a CSP of its own: `sandbox`
//! (no scripts, no forms, an origin of its own), nothing loaded from
//! anywhere, only the mail's inline styles, and only this console may
//! frame it.

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse as _, Response};
use minijinja::context;

use super::App;
use super::pages::{self, render};
use super::session::Signed;
use crate::commands::preview::{Sample, samples};
use crate::db;
use crate::mail::Templates;

/// The frame's policy: a sandbox without scripts, nothing fetched, the
/// mail's own inline styles, framed by this console only.
pub const FRAME_CSP: &str = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

/// Which mail a frame shows.
#[derive(Debug, serde::Deserialize)]
pub struct Which {
    step: String,
    locale: String,
}

/// A sample and its frame's query string.
#[derive(Debug, serde::Serialize)]
struct Shown {
    #[serde(flatten)]
    sample: Sample,
    frame: String,
}

pub async fn list(State(app): State<App>, Extension(signed): Extension<Signed>) -> Response {
    let samples = match build(&app, None).await {
        Ok(s) => s,
        Err(response) => return response,
    };
    let shown: Vec<Shown> = samples
        .into_iter()
        .map(|sample| Shown {
            frame: url::form_urlencoded::Serializer::new(String::new())
                .append_pair("step", &sample.step)
                .append_pair("locale", &sample.locale)
                .finish(),
            sample,
        })
        .collect();
    render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "preview.html",
        context! { title => "Preview", samples => shown },
    )
}

/// `GET /preview/frame?step=..&locale=..`: the HTML part alone.
pub async fn frame(State(app): State<App>, Query(which): Query<Which>) -> Response {
    let samples = match build(&app, Some((&which.step, &which.locale))).await {
        Ok(s) => s,
        Err(response) => return response,
    };
    let Some(sample) = samples.into_iter().next() else {
        return (StatusCode::NOT_FOUND, "no such step and locale").into_response();
    };
    let body = sample.mail.html.unwrap_or_else(|| {
        "<!doctype html><p>This reminder is text only: it has no HTML part.</p>".to_owned()
    });
    let mut response = Html(body).into_response();
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(FRAME_CSP),
    );
    response
}

/// The samples (`only`: one step in one locale), or the page that says
/// why there are none.
async fn build(app: &App, only: Option<(&str, &str)>) -> Result<Vec<Sample>, Response> {
    let settings = &app.settings;
    let today = db::today(&app.db, settings.schedule.timezone)
        .await
        .map_err(|e| pages::failed(app, "read the database clock", &e))?;
    let templates = Templates::load(
        &settings.templates,
        &settings.company,
        &settings.reminders.stages,
    )
    .map_err(|e| pages::failed(app, "load the templates", &e))?;
    samples(settings, &templates, today, only)
        .map_err(|e| pages::failed(app, "build the sample reminders", e.as_ref()))
}
