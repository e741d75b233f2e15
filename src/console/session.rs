//! Sessions: the cookie holds a random token; the database holds its SHA-256, the
//! user's name and the CSRF token (`db::console`). The role is read from
//! the configuration on every request, so a changed role applies at once
//! and a removed user is signed out.

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};

use super::App;
use crate::config::Role;

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
    pub fn is_editor(&self) -> bool {
        self.role == Role::Editor
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
    let Some(row) = app.desk().session(&token_sha256).await? else {
        return Ok(None);
    };
    Ok(app.settings.console.user(&row.user_name).map(|u| Signed {
        user: u.name.clone(),
        role: u.role,
        csrf: row.csrf,
        token_sha256,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; ir_console=tok; b=2"),
        );
        assert_eq!(cookie(&headers, COOKIE), Some("tok"));
        assert_eq!(cookie(&headers, "c"), None);
    }
}
