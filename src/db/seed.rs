//! Demo data for `seed`: customers and invoices, a chosen share of them
//! overdue. Generated in SQL (`generate_series`) so a million invoices take
//! seconds, not minutes.

use chrono::NaiveDate;
use sqlx::PgPool;

/// What `seed` created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Seeded {
    pub customers: i64,
    pub invoices: i64,
    pub overdue: i64,
    pub paid: i64,
    pub not_yet_due: i64,
}

/// Inserts `customers` customers and `invoices` invoices. The first
/// `overdue` invoices are unpaid and due before `cutoff` (overdue today);
/// of the rest, half are paid and half are due in the future.
pub async fn seed(
    pool: &PgPool,
    customers: i64,
    invoices: i64,
    overdue: i64,
    today: NaiveDate,
    cutoff: NaiveDate,
) -> Result<Seeded, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let (first_customer, created): (Option<i64>, i64) = sqlx::query_as(
        "WITH created AS (
             INSERT INTO customers (name, email)
             SELECT 'Customer ' || g, 'customer' || g || '@example.com'
               FROM generate_series(1, $1::bigint) AS g
             RETURNING id
         )
         SELECT min(id), count(*) FROM created",
    )
    .bind(customers)
    .fetch_one(&mut *tx)
    .await?;
    let first_customer = first_customer.unwrap_or(0);
    let rest = invoices - overdue;
    let paid = rest / 2;
    sqlx::query(
        "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date, paid_at)
         SELECT $1 + (g % $2),
                'INV-' || to_char($4::date, 'YYYYMMDD') || '-' || lpad(g::text, 7, '0'),
                1000 + (g * 7919) % 250000,
                'EUR',
                CASE
                    WHEN g <= $5 THEN $6::date - 1 - (g % 45)::int
                    WHEN g <= $5 + $7 THEN $4::date - (g % 60)::int
                    ELSE $4::date + 1 + (g % 30)::int
                END,
                CASE WHEN g > $5 AND g <= $5 + $7 THEN now() - ((g % 30) || ' days')::interval END
           FROM generate_series(1, $3::bigint) AS g",
    )
    .bind(first_customer)
    .bind(created.max(1))
    .bind(invoices)
    .bind(today)
    .bind(overdue)
    .bind(cutoff)
    .bind(paid)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Seeded {
        customers: created,
        invoices,
        overdue,
        paid,
        not_yet_due: rest - paid,
    })
}

/// How many invoices exist (for `seed --if-empty`).
pub async fn count_invoices(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM invoices")
        .fetch_one(pool)
        .await
}
