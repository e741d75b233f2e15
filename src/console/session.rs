//! Sessions and the gate every page passes: a request without a live
//! session is sent to `/login`; every POST must come from an operator
//! (a viewer gets 403) and carry its session's CSRF token (403 without
//! it). Both checks run here, before any handler, so no route can forget
//! them. Only `POST /logout` is open to viewers, and it still needs the
//! token.
//!
//! The cookie holds a random token; the database holds its SHA-256, the
//! user's name and the CSRF token (`db::console`). The role is read from
//! the configuration on every request, so a changed role applies at once
//! and a removed user is signed out.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Redirect, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::App;
use crate::config::Role;
use crate::db;

/// The session cookie's name.
pub const COOKIE: &str = "ir_console";

/// The signed-in user, put in the request's extensions by [`gate`].
#[derive(Debug, Clone)]
pub struct Signed {
    pub user: String,
    pub role: Role,
    pub csrf: String,
    pub token_sha256: Vec<u8>,
}

impl Signed {
    pub fn is_operator(&self) -> bool {
        self.role == Role::Operator
    }
}

/// 32 random bytes, URL-safe base64.
pub fn random_token() -> String {
    use argon2::password_hash::rand_core::{OsRng, RngCore as _};
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn sha256(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// The value of cookie `name` in `headers`.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The `Set-Cookie` value for `token` (empty and expired: sign-out).
pub fn set_cookie(app: &App, token: Option<&str>) -> HeaderValue {
    let secure = if app.secure_cookie { "; Secure" } else { "" };
    let (value, age) = match token {
        Some(t) => (t, app.settings.console.session_ttl.as_secs()),
        None => ("", 0),
    };
    let text = format!(
        "{COOKIE}={value}; Path={}; HttpOnly; SameSite=Strict; Max-Age={age}{secure}",
        app.path("/")
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The session of `headers`' cookie, if live and its user still exists.
pub async fn signed(app: &App, headers: &HeaderMap) -> Result<Option<Signed>, sqlx::Error> {
    let Some(token) = cookie(headers, COOKIE).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let token_sha256 = sha256(token);
    let Some(row) = db::console::find_session(&app.db, &token_sha256).await? else {
        return Ok(None);
    };
    Ok(app.settings.console.user(&row.user_name).map(|u| Signed {
        user: u.name.clone(),
        role: u.role,
        csrf: row.csrf,
        token_sha256,
    }))
}

/// Middleware for every page but `/login` and the static files.
pub async fn gate(State(app): State<App>, mut request: Request, next: Next) -> Response {
    let signed = match signed(&app, request.headers()).await {
        Ok(Some(s)) => s,
        Ok(None) => return Redirect::to(&app.path("/login")).into_response(),
        Err(e) => return super::pages::failed(&app, "read the session", &e),
    };
    if request.method() == Method::POST {
        let is_logout = request.uri().path() == app.path("/logout");
        if !signed.is_operator() && !is_logout {
            return super::pages::refuse(&app, &signed, StatusCode::FORBIDDEN, "Your role is viewer: you can read everything but change nothing.");
        }
        let (parts, body) = request.into_parts();
        let bytes = match axum::body::to_bytes(body, super::MAX_BODY).await {
            Ok(b) => b,
            Err(_) => return StatusCode::PAYLOAD_TOO_LARGE.into_response(),
        };
        let sent = form_field(&bytes, "csrf").unwrap_or_default();
        if !bool::from(sent.as_bytes().ct_eq(signed.csrf.as_bytes())) {
            return super::pages::refuse(&app, &signed, StatusCode::FORBIDDEN, "The form's security token is missing or stale: reload the page and try again. Nothing was changed.");
        }
        request = Request::from_parts(parts, Body::from(bytes));
    }
    request.extensions_mut().insert(signed);
    next.run(request).await
}

/// Field `name` of a urlencoded form body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    url::form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; ir_console=tok; b=2"));
        assert_eq!(cookie(&headers, COOKIE), Some("tok"));
        assert_eq!(cookie(&headers, "c"), None);
    }

    #[test]
    fn a_forms_token_is_read_from_its_body() {
        assert_eq!(form_field(b"message_id=x&csrf=a%2Bb", "csrf").as_deref(), Some("a+b"));
        assert_eq!(form_field(b"message_id=x", "csrf"), None);
    }
}
