//! Reminder stages against the real services: which step each invoice gets,
//! when, and what never happens (a superseded step sent late, a paused
//! invoice reminded, two steps within the gap).

use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

use crate::common::{self, SmtpMode, World};

async fn tick(world: &World) {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
}

/// The steps received, in order.
fn steps(world: &World) -> Vec<String> {
    world
        .sink
        .received()
        .iter()
        .map(|m| m.period().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn an_invoice_walks_through_every_step_once_as_its_due_date_moves_back_day_by_day() {
    let mut world = World::new().await;
    world.set("reminders.min_days_between", 0);
    // Due in 6 days; each loop is one day later.
    common::insert_invoice(world.pool(), "Ada", "ada@example.test", -6, false).await;
    let mut first_seen = Vec::new();
    for age in -6..=70 {
        let before = world.sink.count();
        tick(&world).await;
        for mail in &world.sink.received()[before..] {
            first_seen.push((age, mail.period().unwrap_or_default()));
        }
        common::age_invoices(world.pool(), 1).await;
    }

    let expected: Vec<(i32, String)> = [
        (-3, "upcoming"),
        (3, "overdue"),
        (21, "final"),
        (35, "final-2"),
        (49, "final-3"),
    ]
    .into_iter()
    .map(|(age, key)| (age, key.to_owned()))
    .collect();
    assert_eq!(
        first_seen, expected,
        "each step once, on its day, then nothing"
    );
    common::assert_no_duplicate_mail(&world.sink);
}

#[tokio::test]
async fn an_invoice_first_seen_forty_days_overdue_gets_only_final_2() {
    let world = World::new().await;
    common::insert_invoice(world.pool(), "Late", "late@example.test", 40, false).await;

    tick(&world).await;
    tick(&world).await;

    assert_eq!(
        steps(&world),
        vec!["final-2"],
        "21 + 14 <= 40: the earlier steps are never sent late"
    );
}

#[tokio::test]
async fn a_failed_step_is_discarded_as_superseded_once_the_next_step_is_due_and_never_retried() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "Ada", "ada@example.test", 10, false).await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    tick(&world).await;
    assert_eq!(
        common::statuses(world.pool()).await,
        vec![(id, "failed".to_owned())]
    );
    world.sink.set_mode(SmtpMode::Accept);
    common::age_invoices(world.pool(), 11).await; // 21 days: "final" is due

    tick(&world).await;
    tick(&world).await;

    assert_eq!(
        steps(&world),
        vec!["final"],
        "the failed 'overdue' is never retried"
    );
    let rows: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT period, status, last_error FROM reminders ORDER BY id")
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert_eq!(rows[0].0, "overdue");
    assert_eq!(rows[0].1, "discarded");
    assert_eq!(rows[0].2.as_deref(), Some("superseded by final"));
    assert_eq!((rows[1].0.as_str(), rows[1].1.as_str()), ("final", "sent"));
}

#[tokio::test]
async fn a_failed_step_still_due_is_retried() {
    let world = World::new().await;
    common::insert_invoice(world.pool(), "Ada", "ada@example.test", 10, false).await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    tick(&world).await;
    world.sink.set_mode(SmtpMode::Accept);

    tick(&world).await;

    assert_eq!(steps(&world), vec!["overdue"]);
    assert_eq!(common::count_status(world.pool(), "sent").await, 1);
}

#[tokio::test]
async fn a_paused_customer_and_a_disputed_invoice_get_nothing_until_the_pause_ends() {
    let world = World::new().await;
    let paused_customer =
        common::insert_invoice(world.pool(), "P", "p@example.test", 10, false).await;
    let disputed = common::insert_invoice(world.pool(), "D", "d@example.test", 10, false).await;
    let dispute_over = common::insert_invoice(world.pool(), "O", "o@example.test", 10, false).await;
    let control = common::insert_invoice(world.pool(), "C", "c@example.test", 10, false).await;
    sqlx::query(
        "UPDATE customers SET reminders_paused = true
          WHERE id = (SELECT customer_id FROM invoices WHERE id = $1)",
    )
    .bind(paused_customer)
    .execute(world.pool())
    .await
    .unwrap();
    for (invoice, until) in [(disputed, 0), (dispute_over, -1)] {
        sqlx::query("UPDATE invoices SET reminders_paused_until = current_date + $2 WHERE id = $1")
            .bind(invoice)
            .bind(until)
            .execute(world.pool())
            .await
            .unwrap();
    }

    tick(&world).await;

    let mut mailed = world.sink.invoice_ids();
    mailed.sort();
    assert_eq!(mailed, vec![dispute_over, control]);
}

#[tokio::test]
async fn min_days_between_delays_the_next_step_until_the_gap_has_passed() {
    let world = World::new().await; // min_days_between = 2, the default
    let id = common::insert_invoice(world.pool(), "Ada", "ada@example.test", 20, false).await;
    tick(&world).await;
    assert_eq!(steps(&world), vec!["overdue"]);
    common::age_invoices(world.pool(), 1).await; // 21 days: "final" is due

    tick(&world).await;
    let while_in_gap = steps(&world);
    // Two days later by the reminder's date: the gap has passed.
    sqlx::query(
        "UPDATE reminders SET created_at = created_at - interval '2 days', claimed_at = claimed_at - interval '2 days' WHERE invoice_id = $1::text",
    )
    .bind(id)
    .execute(world.pool())
    .await
    .unwrap();
    tick(&world).await;

    assert_eq!(while_in_gap, vec!["overdue"], "final waits for the gap");
    assert_eq!(steps(&world), vec!["overdue", "final"]);
}

#[tokio::test]
async fn the_dry_run_names_each_invoices_step_and_counts_them_per_step() {
    let world = World::new().await;
    common::insert_invoice(world.pool(), "U", "u@example.test", -2, false).await;
    common::insert_invoice(world.pool(), "O1", "o1@example.test", 5, false).await;
    common::insert_invoice(world.pool(), "O2", "o2@example.test", 6, false).await;
    common::insert_invoice(world.pool(), "F", "f@example.test", 37, false).await;

    let out = common::cli(&world, &["run-once", "--dry-run"]).await;

    let text = common::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("4 reminder(s) would be sent"), "{text}");
    for line in ["  upcoming: 1", "  overdue: 2", "  final-2: 1"] {
        assert!(text.lines().any(|l| l == line), "{line:?} missing: {text}");
    }
    assert!(
        common::statuses(world.pool()).await.is_empty(),
        "a dry run claims nothing"
    );
}

#[tokio::test]
async fn audit_counts_as_missing_the_invoices_whose_due_step_has_no_reminder() {
    let world = World::new().await;
    common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    tick(&world).await;
    // Reminded for "overdue"; now its "final" is due and not sent yet.
    common::age_invoices(world.pool(), 12).await;
    let fresh = common::insert_invoice(world.pool(), "B", "b@example.test", 4, false).await;
    sqlx::query("UPDATE reminders SET created_at = created_at - interval '5 days', claimed_at = claimed_at - interval '5 days'")
        .execute(world.pool())
        .await
        .unwrap();

    let out = common::cli(&world, &["audit", "--json"]).await;

    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["missing_count"], 2, "{report}");
    let missing: Vec<(i64, String)> = report["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["invoice_id"].as_str().unwrap().parse::<i64>().unwrap(),
                m["step"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(missing.contains(&(fresh, "overdue".to_owned())), "{report}");
    assert!(missing.iter().any(|(_, step)| step == "final"), "{report}");
}
