//! Bad rows on a live system.

use std::time::Duration;

use crate::common::{self, Backend};
use crate::for_each_backend;
use crate::harness;

for_each_backend!(bad_rows_are_skipped_and_reported_each_with_its_problem_and_the_rest_go_out,);

async fn bad_rows_are_skipped_and_reported_each_with_its_problem_and_the_rest_go_out(
    backend: Backend,
) {
    let world = harness::world_for(backend).await;
    let pool = world.pool().clone();
    let empty = common::insert_invoice(&pool, "Empty Address", "", 10, false).await;
    let invalid = common::insert_invoice(&pool, "Invalid", "not an address", 10, false).await;
    let crlf = common::insert_invoice(
        &pool,
        "Eve\r\nBcc: all@evil.test",
        "eve@example.test",
        10,
        false,
    )
    .await;
    let huge =
        common::insert_invoice(&pool, &"N".repeat(10_240), "huge@example.test", 10, false).await;
    let unicode =
        common::insert_invoice(&pool, "Zoë Ñandú 🧾", "zoe@example.test", 10, false).await;
    common::insert_overdue(&pool, 100).await;

    // What the schema refuses never reaches the worker.
    let customer: i64 = sqlx::query_scalar("SELECT min(id) FROM customers")
        .fetch_one(&pool)
        .await
        .unwrap();
    let negative = sqlx::query(
        "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date) VALUES ($1, 'NEG', -100, 'EUR', current_date - 10)",
    )
    .bind(customer)
    .execute(&pool)
    .await;
    assert!(negative.unwrap_err().to_string().contains("amount_cents"));
    let no_due_date = sqlx::query(
        "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date) VALUES ($1, 'NULL', 100, 'EUR', NULL)",
    )
    .bind(customer)
    .execute(&pool)
    .await;
    assert!(no_due_date.unwrap_err().to_string().contains("due_date"));

    let mut replicas = harness::spawn_replicas(&world, 2);
    harness::wait_until_settled_skipping(&world, &[], &[empty, invalid], Duration::from_secs(60))
        .await;
    for r in &mut replicas {
        assert!(r.is_running(), "{} crashed: {}", r.name, r.log());
        r.stop_gracefully().await;
    }

    let report = harness::assert_exactly_once_skipping(&world, 0, &[empty, invalid]).await;
    for p in report["source_problems"].as_array().unwrap() {
        assert_eq!(p["problem"], "bad_address", "{p}");
    }
    assert_eq!(
        report["failed"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    // Each tick names them once, in one warning.
    let warned = replicas
        .iter()
        .map(|r| r.log())
        .filter(|log| log.contains("source rows skipped"))
        .count();
    assert!(warned > 0, "no replica warned of the skipped rows");
    assert_eq!(world.sink.count(), 103);
    for mail in world.sink.received() {
        assert_eq!(mail.header("Bcc"), None);
        let to = mail.header("To").unwrap_or_default();
        assert!(
            to.len() < 400,
            "the 10 kB name was not cut: {} bytes",
            to.len()
        );
        if mail.invoice_id() == Some(crlf)
            || mail.invoice_id() == Some(huge)
            || mail.invoice_id() == Some(unicode)
        {
            assert_eq!(mail.to.len(), 1);
        }
    }
}
