//! Reminding from the user's own billing tables: UUID keys, decimal
//! amounts, "paid" as a status, through a view, with three replicas
//! racing over several steps while invoices are paid.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::billing::{self, insert_billing_invoices};
use crate::common::{self, Backend, World};
use crate::harness;

async fn wait_for_mails(world: &World, n: usize) {
    common::wait_until(&format!("{n} mails"), Duration::from_secs(60), || async {
        world.sink.count() >= n
    })
    .await;
}

/// Moves every billing invoice's due date `days` earlier: time passing.
async fn age(world: &World, days: i32) {
    sqlx::query("UPDATE billing.invoices SET due_on = due_on - $1")
        .bind(days)
        .execute(world.pool())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uuid_keyed_billing_schema_is_reminded_once_per_step_across_replicas_and_never_after_payment()
 {
    let mut world = harness::world_for(Backend::Redis).await;
    world
        .set("reminders.min_days_between", 0)
        .set("reminders.batch_size", 50);
    billing::use_uuid_billing(&mut world).await;
    // Due in two days: each owes "upcoming" today.
    let ids = insert_billing_invoices(world.pool(), 200, -2, "1234.50").await;
    let mut replicas = harness::spawn_replicas(&world, 3);

    wait_for_mails(&world, 200).await;
    age(&world, 7).await; // now five days overdue: "overdue"
    wait_for_mails(&world, 400).await;
    let paid = &ids[..50];
    sqlx::query("UPDATE billing.invoices SET status = 'paid' WHERE id = ANY($1)")
        .bind(paid)
        .execute(world.pool())
        .await
        .unwrap();
    age(&world, 20).await; // 25 days overdue: "final", for the unpaid only
    wait_for_mails(&world, 550).await;
    // One more cron slot for anything that should not come.
    harness::wait_for_runs(&world, 3, Duration::from_secs(10)).await;
    let runs_now: i64 = sqlx::query_scalar("SELECT count(*) FROM job_runs")
        .fetch_one(world.pool())
        .await
        .unwrap();
    harness::wait_for_runs(&world, runs_now + 2, Duration::from_secs(20)).await;
    harness::stop_all(&mut replicas).await;

    let mut per_invoice_step: HashMap<(String, String), usize> = HashMap::new();
    for mail in world.sink.received() {
        let id = mail.header("X-Invoice-Id").unwrap().trim().to_owned();
        let step = mail.period().unwrap();
        *per_invoice_step.entry((id, step)).or_default() += 1;
    }
    let twice: Vec<_> = per_invoice_step.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "mailed twice: {twice:?}");
    assert_eq!(world.sink.count(), 550);
    for id in &ids {
        let got = |step: &str| per_invoice_step.contains_key(&(id.to_string(), step.to_owned()));
        assert!(got("upcoming") && got("overdue"), "{id}");
        assert_eq!(
            got("final"),
            !paid.contains(id),
            "{id}: final only while unpaid"
        );
    }
    let (code, report) = harness::audit(&world).await;
    assert_eq!(code, 0, "{report}");
    let duplicates: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM reminders GROUP BY invoice_id, period HAVING count(*) > 1) d",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    assert_eq!(duplicates, 0);
}
