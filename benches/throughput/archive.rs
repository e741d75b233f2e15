//! The archive's size per message (`BENCH_ARCHIVE`, on by default; issue
//! 20): a 10,000-reminder tick with `archive.store = "database"`, then
//! `pg_total_relation_size('message_archive')` (table, TOAST and indexes,
//! after `VACUUM ANALYZE`) per archived message, beside the mean size of
//! the messages as sent; and the same tick's rate with the archive off and
//! on.

use crate::seed::seed_overdue;
use crate::sink::Sink;
use crate::worker::Worker;

const REMINDERS: i64 = 10_000;

/// Runs the case on today's worker's database and prints it.
pub async fn run(new: &Worker, sink: &Sink) {
    let schema = new.db.schema.clone();
    new.db.reset_all().await;
    seed_overdue(&new.db.pool, &schema, REMINDERS, 0).await;
    let off = new
        .run_once(sink.port, REMINDERS as usize, &[], false)
        .await;
    new.db.reset_runs().await;
    let on = new
        .run_once(
            sink.port,
            REMINDERS as usize,
            &[("archive.store", "database".to_owned())],
            false,
        )
        .await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "VACUUM ANALYZE {schema}.message_archive"
    )))
    .execute(&new.db.pool)
    .await
    .expect("vacuum the archive");
    let (archived, total, raw, compressed): (i64, i64, i64, i64) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT count(*), pg_total_relation_size('{schema}.message_archive'),
                    COALESCE(sum(size), 0)::bigint, COALESCE(sum(octet_length(compressed)), 0)::bigint
               FROM {schema}.message_archive"
        )))
        .fetch_one(&new.db.pool)
        .await
        .expect("archive size");
    new.db.reset_runs().await;
    let per = |n: i64| n / archived.max(1);
    println!(
        "archive (archive.store = \"database\"), {archived} messages: {} bytes each on disk \
         (table, TOAST, indexes), {} bytes as sent, {} compressed; the tick {:.0}/s with it, \
         {:.0}/s without",
        per(total),
        per(raw),
        per(compressed),
        on.rate,
        off.rate
    );
}
