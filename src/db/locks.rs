//! SQL for locking: PostgreSQL advisory locks (the `postgres` lock backend)
//! and the fencing high-water marks every claim checks.

use sqlx::PgConnection;
use uuid::Uuid;

use super::Db;
use super::conn::on_db;
use crate::config::SqlName;

/// `pg_try_advisory_lock`: session-level, held until unlocked or until the
/// connection closes.
pub async fn try_advisory_lock(conn: &mut PgConnection, lock_id: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(lock_id)
        .fetch_one(conn)
        .await
}

/// True if the lock was held by this session.
pub async fn advisory_unlock(conn: &mut PgConnection, lock_id: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
        .bind(lock_id)
        .fetch_one(conn)
        .await
}

/// A round trip on the lock's own connection: while it answers, the session
/// (and with it the lock) is alive.
pub async fn ping(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT 1").execute(conn).await?;
    Ok(())
}

/// The next fencing token, above `floor`. The sequence never goes back, so
/// the floor only matters if someone reset it.
pub async fn next_fence(
    conn: &mut PgConnection,
    schema: &SqlName,
    floor: i64,
) -> Result<i64, sqlx::Error> {
    let seq = format!("{}.lock_fence_seq", schema.quoted());
    let next: i64 = sqlx::query_scalar("SELECT nextval($1::regclass)")
        .bind(&seq)
        .fetch_one(&mut *conn)
        .await?;
    if next > floor {
        return Ok(next);
    }
    sqlx::query_scalar("SELECT setval($1::regclass, $2 + 1)")
        .bind(&seq)
        .bind(floor)
        .fetch_one(conn)
        .await
}

/// The session holding advisory lock `lock_id` in this database, if any:
/// (backend pid, application_name).
pub async fn advisory_holder(
    conn: &mut PgConnection,
    lock_id: i64,
) -> Result<Option<(i32, String)>, sqlx::Error> {
    // A bigint advisory lock appears in pg_locks split into two oids.
    let high = (lock_id >> 32) & 0xFFFF_FFFF;
    let low = lock_id & 0xFFFF_FFFF;
    sqlx::query_as(
        "SELECT a.pid, coalesce(a.application_name, '')
           FROM pg_locks l
           JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND l.classid::bigint = $1 AND l.objid::bigint = $2
          LIMIT 1",
    )
    .bind(high)
    .bind(low)
    .fetch_optional(conn)
    .await
}

/// The fencing floor of `lock_key`: the highest token any holder has drawn
/// and recorded (a run records its token before its first claim) or
/// written (0 if none). A new token is always drawn above it, so a lock
/// backend that lost its counter can never hand out a token a holder
/// already has.
pub async fn fence_high_water(db: &Db, lock_key: &str) -> Result<i64, sqlx::Error> {
    on_db!(db, |c| sqlx::query_scalar(db.sql(
        "SELECT GREATEST(
                    (SELECT token FROM {ir}.lock_fences WHERE lock_key = $1),
                    (SELECT max(fence_token) FROM {ir}.job_runs WHERE lock_key = $1),
                    0)"
    ),)
    .persistent(db.named())
    .bind(lock_key)
    .fetch_one(&mut *c)
    .await)
}

/// The fencing token a claim presents: the number drawn with the lock,
/// the lock's token (two holders may draw one number after a counter
/// reset), and the lock it was drawn for.
#[derive(Debug, Clone, Copy)]
pub struct Fence<'a> {
    pub lock_key: &'a str,
    pub token: i64,
    pub holder: Uuid,
}

/// Advances the high-water mark of `fence.lock_key` to `fence.token` unless
/// a newer holder has already written: a higher number, or the same number
/// written by another holder (after a counter reset two holders can draw
/// one number; the first to write keeps it). Returns false when the fence
/// is stale; the caller must then roll back. The row lock it takes
/// serialises claims of one lock until the transaction ends.
pub async fn advance_fence(
    c: &mut PgConnection,
    db: &Db,
    fence: Fence<'_>,
) -> Result<bool, sqlx::Error> {
    let advanced: Option<i64> = sqlx::query_scalar(db.sql(
        "INSERT INTO {ir}.lock_fences (lock_key, token, holder) VALUES ($1, $2, $3)
         ON CONFLICT (lock_key) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder
          WHERE lock_fences.token < EXCLUDED.token
             OR (lock_fences.token = EXCLUDED.token
                 AND lock_fences.holder IS NOT DISTINCT FROM EXCLUDED.holder)
         RETURNING token",
    ))
    .persistent(db.named())
    .bind(fence.lock_key)
    .bind(fence.token)
    .bind(fence.holder)
    .fetch_optional(c)
    .await?;
    Ok(advanced.is_some())
}
