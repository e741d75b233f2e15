//! The gate every page but `/login` and the static files passes, before
//! any handler, so no route can forget it: a request without a live
//! session is sent to `/login`; every POST must come from an editor (a
//! viewer gets 403) and carry its session's CSRF token (403 without it),
//! and nothing changes either way. Only `POST /logout` is open to viewers,
//! and it still needs the token.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Redirect, Response};
use subtle::ConstantTimeEq as _;

use super::App;
use super::failure::{Failure, failed, refused};
use super::pages;
use super::session::{Signed, signed};

/// Middleware for every page but `/login` and the static files; it also
/// renders the message page of a handler's failure with the user's name.
pub async fn gate(State(app): State<App>, request: Request, next: Next) -> Response {
    let signed = match signed(&app, request.headers()).await {
        Ok(Some(s)) => s,
        Ok(None) => return Redirect::to(&app.path("/login")).into_response(),
        Err(e) => return failed("read the session")(e).into_response(),
    };
    let response = match admit(&app, &signed, request).await {
        Ok(mut request) => {
            request.extensions_mut().insert(signed.clone());
            next.run(request).await
        }
        Err(refusal) => refusal.into_response(),
    };
    pages::finish(&app, Some(&signed), response)
}

/// `request`, if `signed` may make it: any GET; a POST from an editor
/// with its session's token (and `POST /logout` from anyone with it).
async fn admit(app: &App, signed: &Signed, request: Request) -> Result<Request, Failure> {
    if request.method() != Method::POST {
        return Ok(request);
    }
    let is_logout = request.uri().path() == app.path("/logout");
    if !signed.is_editor() && !is_logout {
        return Err(refused(
            StatusCode::FORBIDDEN,
            "Your role is viewer: you can read everything but change nothing.",
        ));
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, super::MAX_BODY)
        .await
        .map_err(|_| refused(StatusCode::PAYLOAD_TOO_LARGE, "The form is too large."))?;
    let sent = form_field(&bytes, "csrf").unwrap_or_default();
    if !bool::from(sent.as_bytes().ct_eq(signed.csrf.as_bytes())) {
        return Err(refused(
            StatusCode::FORBIDDEN,
            "The form's security token is missing or stale: reload the page and try again. Nothing was changed.",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
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
    fn a_forms_token_is_read_from_its_body() {
        assert_eq!(
            form_field(b"message_id=x&csrf=a%2Bb", "csrf").as_deref(),
            Some("a+b")
        );
        assert_eq!(form_field(b"message_id=x", "csrf"), None);
    }
}
