//! The pace the SMTP relay was last found to take (`mail::pace`), one row
//! per relay (`smtp.host:smtp.port`), so every replica sends at what the
//! relay last allowed, whichever replica learnt it.

use super::Db;
use super::conn::on_db;

/// A stored pace: messages a second (None: no limit) and connections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoredPace {
    pub per_second: Option<f64>,
    pub connections: i32,
}

/// The pace stored for `relay`, if any.
pub async fn read(db: &Db, relay: &str) -> Result<Option<StoredPace>, sqlx::Error> {
    let row: Option<(Option<f64>, i32)> = on_db!(db, |c| sqlx::query_as(
        db.sql("SELECT per_second, connections FROM {ir}.relay_pace WHERE relay = $1")
    )
    .persistent(db.named())
    .bind(relay)
    .fetch_optional(&mut *c)
    .await)?;
    Ok(row.map(|(per_second, connections)| StoredPace {
        per_second,
        connections,
    }))
}

/// Stores `pace` for `relay`; `throttled`: the relay throttled the tick
/// after accepting this many messages a second (None: too few to measure,
/// and the last measured rate is kept).
pub async fn write(
    db: &Db,
    relay: &str,
    pace: StoredPace,
    throttled: Option<Option<f64>>,
) -> Result<(), sqlx::Error> {
    let (was_throttled, accepted) = match throttled {
        Some(accepted) => (true, accepted),
        None => (false, None),
    };
    on_db!(db, |c| sqlx::query(db.sql(
        "INSERT INTO {ir}.relay_pace AS p
                (relay, per_second, connections, accepted_per_second, throttled_at)
         VALUES ($1, $2, $3, $4, CASE WHEN $5 THEN now() END)
         ON CONFLICT (relay) DO UPDATE
            SET per_second = EXCLUDED.per_second, connections = EXCLUDED.connections,
                accepted_per_second = COALESCE(EXCLUDED.accepted_per_second,
                                               p.accepted_per_second),
                throttled_at = CASE WHEN $5 THEN now() ELSE p.throttled_at END,
                updated_at = now()"
    ))
    .persistent(db.named())
    .bind(relay)
    .bind(pace.per_second)
    .bind(pace.connections)
    .bind(accepted)
    .bind(was_throttled)
    .execute(&mut *c)
    .await
    .map(|_| ()))
}
