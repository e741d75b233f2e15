//! Who holds the lock now, with the replica named: `status` and the
//! console's overview both ask this.

use anyhow::Context as _;
use uuid::Uuid;

use super::desk::Desk;
use crate::db;
use crate::lock::{Holder, LockBackend};

/// Who holds the lock now (None: free), with the replica named: Redis
/// stores only the token, so the run that took it names the replica.
/// `status` and the console's overview both ask this.
pub async fn lock_holder(desk: &Desk, lock: &LockBackend) -> anyhow::Result<Option<Holder>> {
    let holder = lock.holder().await.context("failed to read the lock")?;
    let Some(mut holder) = holder else {
        return Ok(None);
    };
    let token = holder
        .token
        .as_deref()
        .and_then(|t| Uuid::parse_str(t).ok());
    if let (None, Some(token)) = (&holder.replica_id, token) {
        holder.replica_id = db::runs::run_by_token(desk.db(), token)
            .await
            .context("failed to read job_runs")?
            .map(|r| r.replica_id);
    }
    Ok(Some(holder))
}
