//! `GET/POST /login` and `POST /logout`. A sign-in makes a new session
//! (a new random token, never one the browser brought) and answers 303 to
//! the overview; a wrong name or password answers 401 with the form, and
//! so does a name or address with too many recent failures (the throttle
//! is asked before the password is checked).

use std::net::SocketAddr;
use std::time::Instant;

use axum::Extension;
use axum::extract::{ConnectInfo, Form, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Redirect, Response};
use minijinja::context;

use super::App;
use super::failure::{Page, failed};
use super::pages::render;
use super::session::{self, Signed};

#[derive(Debug, serde::Deserialize)]
pub struct Credentials {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

pub async fn form(State(app): State<App>) -> Response {
    render(
        &app,
        None,
        StatusCode::OK,
        "login.html",
        context! { title => "Sign in" },
    )
}

pub async fn login(
    State(app): State<App>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Form(credentials): Form<Credentials>,
) -> Page {
    let address = peer.map(|Extension(ConnectInfo(a))| a.ip());
    let name = credentials.username.trim();
    let now = Instant::now();
    if !app.throttle.allows(name, address, now) {
        tracing::warn!(
            user = name,
            ?address,
            "console sign-in refused: too many failures"
        );
        return Ok(refused(
            &app,
            name,
            "Too many failed sign-ins: wait a quarter of an hour.",
        ));
    }
    let app2 = app.clone();
    let (user, password) = (name.to_owned(), credentials.password);
    let verified = tokio::task::spawn_blocking(move || {
        super::auth::verify(&app2.settings.console, &user, &password).map(|u| u.name.clone())
    })
    .await
    .ok()
    .flatten();
    let Some(user) = verified else {
        app.throttle.failed(name, address, now);
        tracing::info!(user = name, ?address, "console sign-in failed");
        return Ok(refused(&app, name, "Wrong user name or password."));
    };
    let token = session::random_token();
    let csrf = session::random_token();
    let ttl = app.settings.console.session_ttl.as_secs_f64();
    app.desk()
        .open_session(&session::sha256(&token), &user, &csrf, ttl)
        .await
        .map_err(failed("store the session"))?;
    tracing::info!(user, "console sign-in");
    let mut response = Redirect::to(&app.path("/")).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session::set_cookie(&app, Some(&token)));
    Ok(response)
}

fn refused(app: &App, name: &str, why: &str) -> Response {
    render(
        app,
        None,
        StatusCode::UNAUTHORIZED,
        "login.html",
        context! { title => "Sign in", error => why, username => name },
    )
}

/// Ends the session (viewers may too) and clears the cookie.
pub async fn logout(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    _headers: HeaderMap,
) -> Page {
    app.desk()
        .end_session(&signed.token_sha256)
        .await
        .map_err(failed("end the session"))?;
    let mut response = Redirect::to(&app.path("/login")).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session::set_cookie(&app, None));
    Ok(response)
}
