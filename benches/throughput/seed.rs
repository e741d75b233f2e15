//! The backlog, written by the bench's own SQL into the demo tables of
//! either schema (`invoice_reminder` today, `public` before the own
//! schema), so that every build gets the same one: N overdue unpaid
//! invoices, each owing exactly one reminder today.

use sqlx::PgPool;

/// Invoices inserted per statement: a 1M backlog in one INSERT took
/// longer than some builds' statement deadline, and batches show progress.
const SEED_BATCH: i64 = 100_000;

/// Empties every table the bench writes, invoices and customers too.
pub async fn reset_all(pool: &PgPool, schema: &str) {
    truncate(
        pool,
        schema,
        &[
            "reminders",
            "job_runs",
            "lock_fences",
            "invoices",
            "customers",
        ],
    )
    .await;
}

/// Empties what runs write (reminders, runs, fences), keeping the backlog.
pub async fn reset_runs(pool: &PgPool, schema: &str) {
    truncate(pool, schema, &["reminders", "job_runs", "lock_fences"]).await;
}

/// TRUNCATE of those of `tables` that exist in `schema` (CASCADE: later
/// builds have tables that refer to runs).
async fn truncate(pool: &PgPool, schema: &str, tables: &[&str]) {
    let mut present = Vec::new();
    for table in tables {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(format!("{schema}.{table}"))
            .fetch_one(pool)
            .await
            .expect("look up a table");
        if exists {
            present.push(format!("{schema}.{table}"));
        }
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "TRUNCATE {} RESTART IDENTITY CASCADE",
        present.join(", ")
    )))
    .execute(pool)
    .await
    .expect("truncate");
}

/// 1,000 customers; `overdue` unpaid invoices due 10 to 39 days ago (each
/// owes one step today: `overdue` or `final` by the default stages, or one
/// reminder by the oldest builds' grace days) and `paid` paid ones.
/// Expects empty tables (ids from 1).
pub async fn seed_overdue(pool: &PgPool, schema: &str, overdue: i64, paid: i64) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {schema}.customers (name, email)
         SELECT 'Customer ' || g, 'customer' || g || '@example.test' FROM generate_series(1, 1000) g"
    )))
    .execute(pool)
    .await
    .expect("customers");
    let total = overdue + paid;
    let mut from = 1;
    while from <= total {
        let to = (from + SEED_BATCH - 1).min(total);
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {schema}.invoices
                    (customer_id, number, amount_cents, currency, due_date, paid_at)
             SELECT 1 + g % 1000, 'INV-' || g, 10000 + g % 5000, 'EUR',
                    current_date - 10 - (g % 30)::int, CASE WHEN g > $1 THEN now() END
               FROM generate_series($2::bigint, $3::bigint) g"
        )))
        .bind(overdue)
        .bind(from)
        .bind(to)
        .execute(pool)
        .await
        .expect("invoices");
        from = to + 1;
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ANALYZE {schema}.invoices; ANALYZE {schema}.customers"
    )))
    .execute(pool)
    .await
    .expect("analyze");
}
