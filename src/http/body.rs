//! Reading a webhook's body within the listener's limits, for every
//! webhook route alike: never past the route's limit ([`MAX_BODY_BYTES`]
//! for bounces, [`MAX_PAYMENT_BODY_BYTES`] for payment signals, whose
//! Stripe events carry whole invoices), never longer than
//! `http.body_read_timeout`, and at most half of `http.max_connections`
//! bodies read at once, so slow senders cannot fill the listener.

use axum::body::{Body, Bytes};

use super::AppState;

/// The largest bounce body read (64 KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// The largest payment signal read (1 MiB): a Stripe `invoice.paid` with
/// a hundred line items is a few hundred KiB.
pub const MAX_PAYMENT_BODY_BYTES: usize = 1024 * 1024;

/// Why a body was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unread {
    /// Over the route's limit, in bytes (413).
    TooLarge(usize),
    /// Not in within `http.body_read_timeout` (408).
    Timeout,
    /// The connection failed while it was read (400).
    Broken,
    /// Half of `http.max_connections` are reading bodies already (503).
    Busy,
}

impl Unread {
    /// What the answer says.
    pub(super) fn reason(self) -> String {
        match self {
            Self::TooLarge(limit) => format!("the body is larger than {limit} bytes"),
            Self::Timeout => "the body did not arrive within http.body_read_timeout".to_owned(),
            Self::Broken => "the body could not be read".to_owned(),
            Self::Busy => "too many webhook requests at once; retry later".to_owned(),
        }
    }
}

/// The whole body, at most `limit` bytes, or why not.
pub(super) async fn read(state: &AppState, body: Body, limit: usize) -> Result<Bytes, Unread> {
    let Ok(_reading) = state.webhook_reads.try_acquire() else {
        return Err(Unread::Busy);
    };
    let deadline = state.ctx.settings.http.body_read_timeout;
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(e)) if too_large(&e) => Err(Unread::TooLarge(limit)),
        Ok(Err(_)) => Err(Unread::Broken),
        Err(_) => Err(Unread::Timeout),
    }
}

/// Whether reading a body failed on its size (not on the connection).
fn too_large(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = error.source();
    }
    false
}
