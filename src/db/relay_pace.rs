//! The rate the SMTP relay was found to take (`mail::pace`), one row per
//! relay (`smtp.host:smtp.port`), so every replica holds what the relay
//! last allowed, whichever replica learnt it. Ages are read and written on
//! the database's clock, so replicas with skewed clocks agree on them.

use std::time::Duration;

use super::Db;
use super::conn::on_db;
use super::params::Params;
use crate::domain::LearnedRate;

const READ: &str = "SELECT per_second, accepted_per_second, raises,
                           EXTRACT(EPOCH FROM now() - COALESCE(quiet_since, updated_at))::float8
                      FROM {ir}.relay_pace WHERE relay = $relay";

const WRITE: &str = "INSERT INTO {ir}.relay_pace AS p
        (relay, per_second, connections, accepted_per_second, throttled_at, raises, quiet_since)
    VALUES ($relay, $per_second, $connections, $measured,
            CASE WHEN $throttled THEN now() END, $raises,
            now() - make_interval(secs => $quiet_for))
    ON CONFLICT (relay) DO UPDATE
       SET per_second = EXCLUDED.per_second, connections = EXCLUDED.connections,
           accepted_per_second = COALESCE(EXCLUDED.accepted_per_second, p.accepted_per_second),
           throttled_at = COALESCE(EXCLUDED.throttled_at, p.throttled_at),
           raises = EXCLUDED.raises, quiet_since = EXCLUDED.quiet_since,
           updated_at = now()";

const STATUS: &str = "SELECT per_second, accepted_per_second, throttled_at
                        FROM {ir}.relay_pace WHERE relay = $relay";

/// What an operator is shown of `relay`'s rate: the rate held (None: no
/// limit), the rate last measured, and when it last throttled.
pub type RateStatus = (
    Option<f64>,
    Option<f64>,
    Option<chrono::DateTime<chrono::Utc>>,
);

/// `relay`'s rate as an operator sees it, if anything is stored.
pub async fn status(db: &Db, relay: &str) -> Result<Option<RateStatus>, sqlx::Error> {
    let statement = db.statement(STATUS);
    let params = Params::new().with("relay", &relay);
    on_db!(db, |c| statement.fetch_optional(&mut *c, &params).await)
}

/// `READ`'s row: rate held, rate measured, raises, seconds quiet.
type StoredRow = (Option<f64>, Option<f64>, i32, Option<f64>);

/// What is stored for `relay`, if anything.
pub async fn read(db: &Db, relay: &str) -> Result<Option<LearnedRate>, sqlx::Error> {
    let statement = db.statement(READ);
    let params = Params::new().with("relay", &relay);
    let row: Option<StoredRow> = on_db!(db, |c| statement.fetch_optional(&mut *c, &params).await)?;
    Ok(
        row.map(|(per_second, measured, raises, quiet_for)| LearnedRate {
            per_second,
            measured,
            raises: u32::try_from(raises).unwrap_or(0),
            quiet_for: quiet_for
                .and_then(|s| Duration::try_from_secs_f64(s.max(0.0)).ok())
                .unwrap_or_default(),
        }),
    )
}

/// Stores `learned` for `relay`; `throttled`: the relay throttled since the
/// last write. `connections`: `smtp.pool_size`.
pub async fn write(
    db: &Db,
    relay: &str,
    learned: &LearnedRate,
    throttled: bool,
    connections: i32,
) -> Result<(), sqlx::Error> {
    let statement = db.statement(WRITE);
    let raises = i32::try_from(learned.raises).unwrap_or(i32::MAX);
    let quiet_for = learned.quiet_for.as_secs_f64();
    let params = Params::new()
        .with("relay", &relay)
        .with("per_second", &learned.per_second)
        .with("connections", &connections)
        .with("measured", &learned.measured)
        .with("throttled", &throttled)
        .with("raises", &raises)
        .with("quiet_for", &quiet_for);
    on_db!(db, |c| statement
        .execute(&mut *c, &params)
        .await
        .map(|_| ()))
}
