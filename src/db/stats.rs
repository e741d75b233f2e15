//! The planner's statistics of `reminders` after a tick that changed much
//! of it: every statement that reads the table (the next tick's claims,
//! `audit`, `explain`) is planned from them, and autovacuum, where it runs
//! at all, refreshes them only a minute or more later.
//!
//! The rule is autovacuum's own default: more than 50 rows plus 10 % of
//! the table changed. `ANALYZE (SKIP_LOCKED)` never waits: if autovacuum
//! or another replica is analyzing the table, this one is skipped
//! (BENCHMARKS.md, "Statistics refreshed after a large tick").

use super::Db;
use super::conn::on_db;

/// Autovacuum's `autovacuum_analyze_threshold` default.
const BASE_ROWS: f64 = 50.0;
/// Autovacuum's `autovacuum_analyze_scale_factor` default.
const SHARE: f64 = 0.1;

/// Whether a tick that wrote `changed` rows into a table the planner
/// believes holds `known` rows (`reltuples`: -1 when never counted)
/// should refresh the statistics.
pub fn worth_analyzing(changed: u64, known: f64) -> bool {
    // Counts far below 2^53 convert exactly; `as` saturates above.
    #[allow(clippy::cast_precision_loss)]
    let changed = changed as f64;
    changed > BASE_ROWS + SHARE * known.max(0.0)
}

/// Refreshes the statistics of `reminders` when `changed` rows (those a
/// tick claimed) are worth it. Ok(true) if it ran `ANALYZE`.
pub async fn refresh_after_tick(db: &Db, changed: u64) -> Result<bool, sqlx::Error> {
    if !worth_analyzing(changed, 0.0) {
        return Ok(false);
    }
    let table = format!("{}.reminders", db.names().schema().quoted());
    let known: f32 = on_db!(db, |c| sqlx::query_scalar(
        "SELECT reltuples FROM pg_class WHERE oid = $1::regclass"
    )
    .persistent(db.named())
    .bind(&table)
    .fetch_one(&mut *c)
    .await)?;
    if !worth_analyzing(changed, f64::from(known)) {
        return Ok(false);
    }
    on_db!(db, |c| sqlx::query(
        db.sql("ANALYZE (SKIP_LOCKED) {ir}.reminders")
    )
    .persistent(false)
    .execute(&mut *c)
    .await)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::worth_analyzing;

    #[test]
    fn a_tick_is_worth_analyzing_when_it_changed_more_than_a_tenth_of_the_table() {
        assert!(worth_analyzing(1_000_000, -1.0), "never counted");
        assert!(worth_analyzing(51, 0.0));
        assert!(!worth_analyzing(50, 0.0));
        assert!(!worth_analyzing(1_000, 1_000_000.0), "a daily tick");
        assert!(worth_analyzing(100_051, 1_000_000.0));
    }
}
