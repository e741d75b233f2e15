//! Console sign-ins (`console_sessions`): a session is found by the
//! SHA-256 of its cookie's token, never by the token itself, and ends when
//! it expires or its user signs out.

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;

/// A signed-in browser, found by the SHA-256 of its cookie's token.
#[derive(Debug, Clone, FromRow)]
pub struct SessionRow {
    pub user_name: String,
    pub csrf: String,
    pub expires_at: DateTime<Utc>,
}

/// Stores a new session that ends after `ttl_secs`.
pub async fn create_session(
    db: &Db,
    token_sha256: &[u8],
    user_name: &str,
    csrf: &str,
    ttl_secs: f64,
) -> Result<(), sqlx::Error> {
    on_db!(db, |c| sqlx::query(db.sql(
        "INSERT INTO {ir}.console_sessions (token_sha256, user_name, csrf, expires_at)
         VALUES ($1, $2, $3, now() + make_interval(secs => $4))"
    ))
    .persistent(db.named())
    .bind(token_sha256)
    .bind(user_name)
    .bind(csrf)
    .bind(ttl_secs)
    .execute(&mut *c)
    .await
    .map(|_| ()))
}

/// The session with this token, unless it has ended.
pub async fn find_session(db: &Db, token_sha256: &[u8]) -> Result<Option<SessionRow>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT user_name, csrf, expires_at FROM {ir}.console_sessions
          WHERE token_sha256 = $1 AND expires_at > now()"
    ))
    .persistent(db.named())
    .bind(token_sha256)
    .fetch_optional(&mut *c)
    .await)
}

/// Ends the session with this token, and every session that has expired.
pub async fn end_session(db: &Db, token_sha256: &[u8]) -> Result<(), sqlx::Error> {
    on_db!(db, |c| sqlx::query(db.sql(
        "DELETE FROM {ir}.console_sessions WHERE token_sha256 = $1 OR expires_at <= now()"
    ))
    .persistent(db.named())
    .bind(token_sha256)
    .execute(&mut *c)
    .await
    .map(|_| ()))
}
