//! Console sign-ins: a session is stored by the SHA-256 of its cookie's
//! token (`db::sessions`), so the console's processes and restarts share
//! them, and a stolen database row cannot be replayed as a cookie.

use super::desk::Desk;
use crate::db;
pub use crate::db::sessions::SessionRow;

impl Desk {
    /// Opens a session for `user_name`, ending after `ttl_secs`.
    pub async fn open_session(
        &self,
        token_sha256: &[u8],
        user_name: &str,
        csrf: &str,
        ttl_secs: f64,
    ) -> Result<(), sqlx::Error> {
        db::sessions::create_session(self.db(), token_sha256, user_name, csrf, ttl_secs).await
    }

    /// The live session of this token, if any.
    pub async fn session(&self, token_sha256: &[u8]) -> Result<Option<SessionRow>, sqlx::Error> {
        db::sessions::find_session(self.db(), token_sha256).await
    }

    /// Ends the session of this token (and every expired one).
    pub async fn end_session(&self, token_sha256: &[u8]) -> Result<(), sqlx::Error> {
        db::sessions::end_session(self.db(), token_sha256).await
    }
}
