//! The PostgreSQL backend: a session-level advisory lock on a dedicated
//! connection, for teams that do not run Redis.
//!
//! # Why session-level, on a connection of its own
//! `pg_try_advisory_xact_lock` would be released when its transaction ends,
//! and our work is mostly *outside* any transaction: claims commit, then mail
//! goes out over SMTP, then results are written. A transaction held open
//! across all that would pin a connection and a snapshot for the whole tick
//! and still protect nothing between its statements from the outside world's
//! point of view. So we take `pg_try_advisory_lock` (session level) on a
//! connection opened for this purpose and held for the whole tick; the
//! pool's connections never hold it.
//!
//! # The lock id
//! Advisory locks are keyed by a 64-bit integer. Ours is
//! [`advisory_lock_id`]`(lock.key)`: FNV-1a 64 of the key's UTF-8 bytes,
//! read as a two's-complement `i64`. It is the same on every replica and
//! every version, so replicas with the same `lock.key` exclude each other.
//!
//! # TTL, renewal, loss
//! The lock lives exactly as long as the session. A process that dies closes
//! its connection and PostgreSQL releases the lock at once; there is no TTL
//! to wait for. The "watchdog" is a liveness check: every `lock.renew_every`
//! a `SELECT 1` on the lock's connection. If the connection fails (the
//! server restarted, the session was terminated, the network dropped it),
//! the lock is gone and the job is cancelled before its next mail, exactly
//! like a lost Redis lock. The same local trust deadline applies: without a
//! successful check for `lock.ttl - ttl/5`, the lease counts as lost.
//!
//! # min_hold
//! A tick shorter than `lock.min_hold` keeps the session (and the lock) open
//! in the background until `acquired + min_hold`, then unlocks. The daemon
//! and `run-once` wait for such kept locks before they exit.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::{AcquireResult, Handle, Holder, LeaseTimes, LockError, Released, Renewal};
use crate::config::Settings;
use crate::db;

/// FNV-1a 64 of `key`, as the `bigint` given to `pg_try_advisory_lock`.
pub fn advisory_lock_id(key: &str) -> i64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = key
        .as_bytes()
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME));
    i64::from_ne_bytes(hash.to_ne_bytes())
}

#[derive(Clone)]
pub struct PostgresLock {
    pub(crate) key: String,
    pub(crate) lock_id: i64,
    pub(crate) times: LeaseTimes,
    options: PgConnectOptions,
    connect_timeout: Duration,
    /// `database.statement_timeout`: every call on the lock's connection.
    deadline: Duration,
    /// `database.schema`, where the fencing sequence is.
    schema: crate::config::SqlName,
    /// Background tasks keeping a lock until `min_hold`.
    kept: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

/// The connection that keeps one acquisition's lock. `None` once released.
#[derive(Clone)]
pub(crate) struct LockConnection {
    conn: Arc<Mutex<Option<PgConnection>>>,
}

impl PostgresLock {
    pub(super) fn new(settings: &Settings, times: LeaseTimes) -> Self {
        Self {
            key: settings.lock.key.clone(),
            lock_id: advisory_lock_id(&settings.lock.key),
            times,
            options: crate::db::options::connect_options(settings),
            connect_timeout: settings.database.connect_timeout,
            deadline: settings.database.statement_timeout,
            schema: settings.database.schema.clone(),
            kept: Arc::default(),
        }
    }

    async fn connect(&self) -> Result<PgConnection, LockError> {
        match tokio::time::timeout(self.connect_timeout, self.options.connect()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) if db::conn::is_refused_login(&e) => Err(LockError::Config(format!(
                "database.url: PostgreSQL refused the lock connection's login ({}); check the user and password in database.url",
                crate::causes::Causes(&e)
            ))),
            Ok(Err(e)) => Err(LockError::Backend(format!(
                "cannot open the lock connection to PostgreSQL: {}",
                crate::causes::Causes(&e)
            ))),
            Err(_) => Err(LockError::Backend(
                "cannot open the lock connection to PostgreSQL within database.connect_timeout"
                    .into(),
            )),
        }
    }

    pub(super) async fn try_acquire(&self, fence_floor: i64) -> Result<AcquireResult, LockError> {
        let mut conn = self.connect().await?;
        let won = within(
            self.deadline,
            db::locks::try_advisory_lock(&mut conn, self.lock_id),
        )
        .await
        .map_err(|e| {
            LockError::Backend(format!(
                "pg_try_advisory_lock failed: {}",
                crate::causes::Causes(&e)
            ))
        })?;
        if !won {
            let _ = conn.close().await;
            return Ok(AcquireResult::Held);
        }
        match within(
            self.deadline,
            db::locks::next_fence(&mut conn, &self.schema, fence_floor),
        )
        .await
        {
            Ok(fence) => Ok(AcquireResult::Won {
                handle: Handle::Postgres(LockConnection {
                    conn: Arc::new(Mutex::new(Some(conn))),
                }),
                fence,
            }),
            Err(e) => {
                // Closing the session releases the lock.
                let _ = conn.close().await;
                Err(LockError::Backend(format!(
                    "cannot draw a fencing token: {}",
                    crate::causes::Causes(&e)
                )))
            }
        }
    }

    /// A liveness check of the lock's session. Any failure of the
    /// connection means the session, and the lock with it, is gone.
    pub(super) async fn renew(&self, lock_conn: &LockConnection) -> Result<Renewal, LockError> {
        let mut slot = lock_conn.conn.lock().await;
        let Some(conn) = slot.as_mut() else {
            return Ok(Renewal::Gone);
        };
        match within(self.deadline, db::locks::ping(conn)).await {
            Ok(()) => Ok(Renewal::Renewed),
            Err(e) => {
                tracing::warn!(error = %e, "the lock's PostgreSQL session failed");
                slot.take();
                Ok(Renewal::Gone)
            }
        }
    }

    pub(super) async fn release(
        &self,
        lock_conn: LockConnection,
        hold_for: Option<Duration>,
    ) -> Result<Released, LockError> {
        let Some(conn) = lock_conn.conn.lock().await.take() else {
            return Ok(Released::NotOwner);
        };
        match hold_for {
            Some(left) => {
                let (lock_id, deadline) = (self.lock_id, self.deadline);
                let task = tokio::spawn(async move {
                    tokio::time::sleep(left).await;
                    unlock(conn, lock_id, deadline).await;
                });
                let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
                kept.retain(|h| !h.is_finished());
                kept.push(task);
                Ok(Released::HeldForMinHold(left))
            }
            None => Ok(if unlock(conn, self.lock_id, self.deadline).await {
                Released::Deleted
            } else {
                Released::NotOwner
            }),
        }
    }

    /// Opens a connection and runs one query (readiness).
    pub(super) async fn ping(&self) -> Result<(), LockError> {
        let mut conn = self.connect().await?;
        let answered = within(self.deadline, db::locks::ping(&mut conn))
            .await
            .map_err(|e| {
                LockError::Backend(format!(
                    "PostgreSQL does not answer: {}",
                    crate::causes::Causes(&e)
                ))
            });
        let _ = conn.close().await;
        answered
    }

    pub(super) async fn holder(&self) -> Result<Option<Holder>, LockError> {
        let mut conn = self.connect().await?;
        let found = within(
            self.deadline,
            db::locks::advisory_holder(&mut conn, self.lock_id),
        )
        .await
        .map_err(|e| {
            LockError::Backend(format!(
                "cannot read pg_locks: {}",
                crate::causes::Causes(&e)
            ))
        })?;
        let _ = conn.close().await;
        Ok(found.map(|(pid, application_name)| Holder {
            replica_id: application_name
                .strip_prefix("invoice-reminder/")
                .map(str::to_owned)
                .or(Some(application_name).filter(|n| !n.is_empty())),
            pid: Some(pid),
            ..Holder::default()
        }))
    }

    pub(super) async fn finish(&self) {
        let kept: Vec<JoinHandle<()>> = {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            kept.drain(..).collect()
        };
        for hold in kept {
            let _ = hold.await;
        }
    }
}

/// Unlocks and closes; true if the session still held the lock. A failure
/// or no answer within `deadline` drops the connection anyway, which
/// releases the lock when the server notices.
async fn unlock(mut conn: PgConnection, lock_id: i64, deadline: Duration) -> bool {
    let held = within(deadline, db::locks::advisory_unlock(&mut conn, lock_id))
        .await
        .unwrap_or(false);
    if held {
        let _ = tokio::time::timeout(deadline, conn.close()).await;
    }
    held
}

/// A call on the lock's connection that must answer within `deadline`.
async fn within<T>(
    deadline: Duration,
    call: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    match tokio::time::timeout(deadline, call).await {
        Ok(result) => result,
        Err(_) => Err(db::conn::timed_out(deadline, "database.statement_timeout")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ids_are_fnv1a_64_of_the_key() {
        // Reference values of FNV-1a 64.
        assert_eq!(advisory_lock_id(""), 0xcbf2_9ce4_8422_2325_u64 as i64);
        assert_eq!(advisory_lock_id("a"), 0xaf63_dc4c_8601_ec8c_u64 as i64);
        // The default key's id, as documented in the README.
        assert_eq!(advisory_lock_id("invoice-reminder:lock"), DEFAULT_KEY_ID);
    }

    /// Documented in the README ("Choosing a lock backend").
    const DEFAULT_KEY_ID: i64 = -1_493_233_006_242_521_214;
}
