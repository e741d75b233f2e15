//! Customer mode: a statement goes by its customer's own day. In
//! Pacific/Kiritimati (UTC+14) a customer's invoices owe their next step a
//! day before the same invoices in Pacific/Honolulu (UTC-10), and each
//! customer's statement lists them once, on their own date.

use crate::common::clock_at;

use super::{listed, tick, world_in_customer_mode};

/// A customer in `zone` with two invoices due Sunday 10 January 2027; the
/// invoice ids.
async fn customer_in(world: &crate::common::World, name: &str, zone: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "WITH c AS (
             INSERT INTO customers (name, email, timezone)
             VALUES ($1, lower($1) || '@example.test', $2) RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT id, 'INV-' || id || '-' || n, 1000 * n, 'EUR', '2027-01-10'
           FROM c, generate_series(1, 2) n RETURNING id",
    )
    .bind(name)
    .bind(zone)
    .fetch_all(world.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_statement_owes_its_next_step_on_its_customers_own_date() {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.min_days_between", 0);
    let mut kiritimati = customer_in(&world, "Kiri", "Pacific/Kiritimati").await;
    let mut honolulu = customer_in(&world, "Hono", "Pacific/Honolulu").await;
    kiritimati.sort();
    honolulu.sort();
    let statements = |world: &crate::common::World| {
        world
            .sink
            .received()
            .iter()
            .map(|m| {
                let mut ids = listed(m);
                ids.sort();
                (m.to.concat(), ids)
            })
            .collect::<Vec<_>>()
    };

    // 09:59 UTC on the 12th: still the 12th in Kiritimati, the 11th in
    // Honolulu: both owe `upcoming`, one statement each.
    clock_at(&world, "2027-01-12T09:59:00Z").await;
    tick(&world).await;
    assert_eq!(statements(&world).len(), 2);
    // 10:00 UTC: the 13th (`overdue`) has begun in Kiritimati only.
    clock_at(&world, "2027-01-12T10:00:00Z").await;
    tick(&world).await;
    assert_eq!(
        statements(&world)[2..],
        [("kiri@example.test".to_owned(), kiritimati.clone())]
    );
    // A minute before the 13th in Honolulu: nothing more.
    clock_at(&world, "2027-01-13T09:59:00Z").await;
    tick(&world).await;
    assert_eq!(statements(&world).len(), 3);
    clock_at(&world, "2027-01-13T10:00:00Z").await;
    tick(&world).await;
    assert_eq!(
        statements(&world)[3..],
        [("hono@example.test".to_owned(), honolulu)]
    );
}
