//! Demo data for `seed`: customers and invoices, a chosen share of them
//! owing a reminder today, spread over every step. Generated in SQL
//! (`generate_series`): a few statements for any number of invoices, never
//! a round trip per row.

use super::Db;
use super::conn::on_db;
use chrono::NaiveDate;

/// What `seed` created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Seeded {
    pub customers: i64,
    pub invoices: i64,
    /// Unpaid, owing a reminder today.
    pub owed: i64,
    pub paid: i64,
    /// Unpaid, not owing anything yet (due later than the first stage).
    pub not_yet_due: i64,
}

/// Where owed invoices go: each one's due date falls `0..span` days before
/// `latest_due` of one step, taken in turn.
#[derive(Debug, Clone, Copy)]
pub struct SeedStep {
    pub latest_due: NaiveDate,
    pub span: i32,
}

/// Inserts `customers` customers (every fourth with locale `de`) and
/// `invoices` invoices: the first `owed` spread over `steps`; of the rest,
/// half paid and half due after `not_due_after`.
pub async fn seed(
    db: &Db,
    customers: i64,
    invoices: i64,
    owed: i64,
    steps: &[SeedStep],
    today: NaiveDate,
    not_due_after: NaiveDate,
) -> Result<Seeded, sqlx::Error> {
    let latest: Vec<NaiveDate> = steps.iter().map(|s| s.latest_due).collect();
    let spans: Vec<i32> = steps.iter().map(|s| s.span.max(1)).collect();
    let rest = invoices - owed;
    let paid = rest / 2;
    let created = on_db!(db, tx, |tx| {
        let (first_customer, created): (Option<i64>, i64) = sqlx::query_as(db.sql(
            "WITH created AS (
             INSERT INTO {ir}.customers (name, email, locale)
             SELECT 'Customer ' || g, 'customer' || g || '@example.com',
                    CASE WHEN g % 4 = 0 THEN 'de' END
               FROM generate_series(1, $1::bigint) AS g
             RETURNING id
         )
         SELECT min(id), count(*) FROM created",
        ))
        .persistent(db.named())
        .bind(customers)
        .fetch_one(&mut *tx)
        .await?;
        let first_customer = first_customer.unwrap_or(0);
        sqlx::query(
            db.sql("INSERT INTO {ir}.invoices (customer_id, number, amount_cents, currency, due_date, paid_at)
         SELECT $1 + (g % $2),
                'INV-' || to_char($4::date, 'YYYYMMDD') || '-' || lpad(g::text, 7, '0'),
                1000 + (g * 7919) % 250000,
                'EUR',
                CASE
                    WHEN g <= $5 THEN ($6::date[])[1 + g % cardinality($6)]
                                      - (g % ($7::int[])[1 + g % cardinality($6)])::int
                    WHEN g <= $5 + $8 THEN $4::date - (g % 60)::int
                    ELSE $9::date + 1 + (g % 30)::int
                END,
                CASE WHEN g > $5 AND g <= $5 + $8 THEN now() - ((g % 30) || ' days')::interval END
           FROM generate_series(1, $3::bigint) AS g"),
        )
        .persistent(db.named())
        .bind(first_customer)
        .bind(created.max(1))
        .bind(invoices)
        .bind(today)
        .bind(owed)
        .bind(&latest)
        .bind(&spans)
        .bind(paid)
        .bind(not_due_after)
        .execute(&mut *tx)
        .await?;
        Ok::<_, sqlx::Error>(created)
    })?;
    Ok(Seeded {
        customers: created,
        invoices,
        owed,
        paid,
        not_yet_due: rest - paid,
    })
}

/// How many invoices exist (for `seed --if-empty`).
pub async fn count_invoices(db: &Db) -> Result<i64, sqlx::Error> {
    on_db!(db, |c| sqlx::query_scalar(
        db.sql("SELECT count(*) FROM {ir}.invoices")
    )
    .persistent(db.named())
    .fetch_one(&mut *c)
    .await)
}
