//! `GET /preview`: each step's reminder in each locale, about the sample
//! invoice the templates are checked against, built by `preview`'s code
//! (`operator::preview::samples`, which composes as the tick does). The
//! text part is shown as text; the HTML part in a frame served by
//! `GET /preview/frame` under the mail frame's policy
//! (`pages::MAIL_FRAME_CSP`).

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse as _};
use minijinja::context;

use super::App;
use super::failure::{Failure, Page, failed, refused};
use super::pages::{self, render};
use super::session::Signed;
use crate::mail::Templates;
use crate::operator::preview::{Sample, samples};

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

pub async fn list(State(app): State<App>, Extension(signed): Extension<Signed>) -> Page {
    let samples = build(&app, None).await?;
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
    Ok(render(
        &app,
        Some(&signed),
        StatusCode::OK,
        "preview.html",
        context! { title => "Preview", samples => shown },
    ))
}

/// `GET /preview/frame?step=..&locale=..`: the HTML part alone.
pub async fn frame(State(app): State<App>, Query(which): Query<Which>) -> Page {
    let samples = build(&app, Some((&which.step, &which.locale))).await?;
    let Some(sample) = samples.into_iter().next() else {
        return Err(refused(
            StatusCode::NOT_FOUND,
            format!("No step {} in locale {}.", which.step, which.locale),
        ));
    };
    let body = sample.mail.html.unwrap_or_else(|| {
        "<!doctype html><p>This reminder is text only: it has no HTML part.</p>".to_owned()
    });
    let mut response = Html(body).into_response();
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(pages::MAIL_FRAME_CSP),
    );
    Ok(response)
}

/// The samples (`only`: one step in one locale).
async fn build(app: &App, only: Option<(&str, &str)>) -> Result<Vec<Sample>, Failure> {
    let settings = &app.settings;
    let today = app
        .desk()
        .today()
        .await
        .map_err(failed("read the database clock"))?;
    let templates = Templates::load(
        &settings.templates,
        &settings.company,
        &settings.late_payment,
        &settings.reminders.stages,
    )
    .map_err(failed("load the templates"))?;
    samples(settings, &templates, today, only).map_err(failed("build the sample reminders"))
}
