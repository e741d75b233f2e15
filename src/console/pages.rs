//! Rendering: minijinja templates compiled into the binary, autoescaped
//! (every template is `.html`, so every value from the billing source or
//! a form is escaped unless a template says otherwise, and none does),
//! and the headers every answer carries: a Content-Security-Policy with
//! no inline script or style and `frame-ancestors 'none'` (but for the
//! archived message, which sets its own sandbox policy that only the
//! console may frame), no caching, no sniffing. Bodies are read within `http.body_read_timeout`.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse as _, Response};
use minijinja::{Environment, Value, context};

use super::App;
use super::failure::MessagePage;
use super::session::Signed;

/// Scripts, styles, images and form targets only from the console itself;
/// no frame may hold it; the preview's frame holds our own pages only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The policy of a frame that shows a mail's HTML part (an archived
/// message, a preview): a sandbox without scripts or forms and with an
/// origin of its own, nothing fetched, the mail's own inline styles and
/// `data:` images, framed by this console only.
pub const MAIL_FRAME_CSP: &str = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("login.html", include_str!("templates/login.html")),
    ("message.html", include_str!("templates/message.html")),
    ("overview.html", include_str!("templates/overview.html")),
    ("unknown.html", include_str!("templates/unknown.html")),
    ("activity.html", include_str!("templates/activity.html")),
    ("problems.html", include_str!("templates/problems.html")),
    ("preview.html", include_str!("templates/preview.html")),
    (
        "suppressions.html",
        include_str!("templates/suppressions.html"),
    ),
    ("invoice.html", include_str!("templates/invoice.html")),
    ("customer.html", include_str!("templates/customer.html")),
    ("search.html", include_str!("templates/search.html")),
];

/// The console's stylesheet, served at `/static/console.css`.
pub const STYLESHEET: &str = include_str!("static/console.css");

/// The templates, parsed once.
pub fn environment() -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    for (name, source) in TEMPLATES {
        env.add_template(name, source)?;
    }
    env.add_filter("segment", |value: String| segment(&value));
    Ok(env)
}

/// Renders `template` with `page`'s values and the ones every page uses.
pub fn render(
    app: &App,
    signed: Option<&Signed>,
    status: StatusCode,
    template: &str,
    page: Value,
) -> Response {
    let shared = context! {
        base => app.settings.console.base_path,
        user => signed.map(|s| s.user.clone()),
        editor => signed.is_some_and(Signed::is_editor),
        csrf => signed.map(|s| s.csrf.clone()),
        timezone => app.settings.schedule.timezone.name(),
    };
    let rendered = app
        .templates
        .get_template(template)
        .and_then(|t| t.render(context! { ..page, ..shared }));
    match rendered {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, template, "a console template did not render");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// `response`, or the message page its [`MessagePage`] asks for (a
/// handler's [`super::failure::Failure`]), rendered with `signed`'s name
/// and the response's status.
pub fn finish(app: &App, signed: Option<&Signed>, mut response: Response) -> Response {
    match response.extensions_mut().remove::<MessagePage>() {
        Some(page) => render(
            app,
            signed,
            response.status(),
            "message.html",
            context! { title => page.title, lines => page.lines, back => page.back },
        ),
        None => response,
    }
}

/// Middleware for every answer: the security headers, and the body read
/// in full within `http.body_read_timeout` (408 after), so no handler
/// waits on a slow client.
pub async fn guard(State(app): State<App>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(
        app.settings.http.body_read_timeout,
        axum::body::to_bytes(body, super::MAX_BODY),
    )
    .await;
    let mut response = match read {
        Err(_) => StatusCode::REQUEST_TIMEOUT.into_response(),
        Ok(Err(_)) => StatusCode::PAYLOAD_TOO_LARGE.into_response(),
        Ok(Ok(bytes)) => {
            let response = next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
            finish(&app, None, response)
        }
    };
    let headers = response.headers_mut();
    // A handler's own policy stands (the preview's frame, the archived
    // message's sandbox).
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(CSP));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// `GET /static/console.css`.
pub async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        STYLESHEET,
    )
        .into_response()
}

/// `value` as one path segment (percent-encoded): ids from the billing
/// source may hold `/`, `?` or `#`.
pub fn segment(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A timestamp in the schedule's zone, with the zone named.
pub fn when(app: &App, at: chrono::DateTime<chrono::Utc>) -> String {
    at.with_timezone(&app.settings.schedule.timezone)
        .format("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}
