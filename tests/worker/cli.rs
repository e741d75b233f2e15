//! The operator's commands, through the real binary: seed, audit, status,
//! run-once.

use std::time::Duration;

use invoice_reminder::tick::run_tick;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::{self, Backend, SmtpMode, World};
use crate::for_each_backend;

use crate::common::{cli, stdout};

async fn invoice_count(world: &World) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM invoices")
        .fetch_one(world.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn seed_makes_the_share_of_overdue_invoices_asked_for() {
    let world = World::new().await;

    let out = cli(
        &world,
        &[
            "seed",
            "--customers",
            "5",
            "--invoices",
            "40",
            "--overdue-pct",
            "25",
        ],
    )
    .await;

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout(&out).contains("10 owe a reminder today"),
        "{}",
        stdout(&out)
    );
    let ctx = world.context().await;
    let plan = invoice_reminder::commands::dry_run(&ctx, 100)
        .await
        .unwrap();
    assert_eq!(plan.would_send.len(), 10);
    // The compose demo relies on this: mailpit shows every kind of reminder.
    let steps: Vec<&str> = plan
        .per_step
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(step, _)| step.as_str())
        .collect();
    assert_eq!(
        steps,
        ["upcoming", "overdue", "final", "final-2", "final-3"],
        "{:?}",
        plan.per_step
    );
}

#[tokio::test]
async fn seed_if_empty_adds_nothing_to_a_database_that_has_invoices() {
    let world = World::new().await;
    let args = ["seed", "--customers", "2", "--invoices", "10", "--if-empty"];

    cli(&world, &args).await;
    let second = cli(&world, &args).await;

    assert_eq!(second.status.code(), Some(0));
    assert!(
        stdout(&second).contains("not seeding"),
        "{}",
        stdout(&second)
    );
    assert_eq!(invoice_count(&world).await, 10);
}

#[tokio::test]
async fn audit_exits_1_and_names_the_pairs_when_duplicates_exist() {
    let world = World::new().await;
    let invoice = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    // Only possible once someone drops the constraint; audit must notice.
    sqlx::query("ALTER TABLE reminders DROP CONSTRAINT reminders_invoice_id_period_key")
        .execute(world.pool())
        .await
        .unwrap();
    for _ in 0..2 {
        sqlx::query(
            "INSERT INTO reminders (invoice_id, period, status) VALUES ($1, '2026-11-30', 'sent')",
        )
        .bind(invoice)
        .execute(world.pool())
        .await
        .unwrap();
    }

    let human = cli(&world, &["audit"]).await;
    let json = cli(&world, &["audit", "--json"]).await;

    assert_eq!(human.status.code(), Some(1));
    assert!(
        stdout(&human).contains(&format!("invoice {invoice} period 2026-11-30: 2 rows")),
        "{}",
        stdout(&human)
    );
    assert_eq!(json.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["duplicates"][0]["invoice_id"], invoice.to_string());
    assert_eq!(report["duplicates"][0]["copies"], 2);
}

#[tokio::test]
async fn audit_reports_unknown_failed_and_missing_reminders() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 4).await;
    let ctx = world.context().await;
    world.sink.set_mode(SmtpMode::Refuse5xx);
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    // One reminder left `sending` by a run that ended: delivery unknown.
    sqlx::query("UPDATE reminders SET status = 'sending' WHERE invoice_id = $1::text")
        .bind(ids[0])
        .execute(world.pool())
        .await
        .unwrap();
    let missing = common::insert_invoice(world.pool(), "New", "new@example.test", 9, false).await;

    let out = cli(&world, &["audit", "--json"]).await;

    assert_eq!(out.status.code(), Some(0), "no duplicates");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["unknown"].as_array().unwrap().len(), 1);
    assert_eq!(report["unknown"][0]["invoice_id"], ids[0].to_string());
    assert_eq!(report["failed"].as_array().unwrap().len(), 3);
    assert_eq!(report["missing_count"], 1);
    assert_eq!(report["missing"][0]["invoice_id"], missing.to_string());
    assert_eq!(report["counts"]["discarded"], 3);
}

#[tokio::test]
async fn run_once_exits_0_when_another_replica_holds_the_lock() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 2).await;
    let _other = Backend::Redis.hold_elsewhere(&world).await;

    let out = cli(&world, &["run-once"]).await;

    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lock held, skipping"));
    assert_eq!(world.sink.count(), 0);
}

for_each_backend!(status_names_the_replica_holding_the_lock);

async fn status_names_the_replica_holding_the_lock(backend: Backend) {
    let mut world = World::new().await;
    backend.configure(&mut world);
    world
        .set("replica_id", "worker-7")
        .set("reminders.send_concurrency", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    common::insert_overdue(world.pool(), 20).await;
    let ctx = world.context().await;
    let tick = common::spawn_tick(ctx);
    world.wait_for_mails(1).await;

    let out = cli(&world, &["status", "--json"]).await;
    tick.stop.cancel();
    tick.outcome().await;

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["holder"]["replica_id"], "worker-7", "{status}");
    match backend {
        Backend::Redis => assert!(status["holder"]["ttl_left_ms"].as_i64().unwrap() > 0),
        Backend::Postgres => assert!(status["holder"]["pid"].as_i64().unwrap() > 0),
    }
    assert_eq!(status["last_runs"][0]["replica_id"], "worker-7");
}

#[tokio::test]
async fn a_command_against_a_missing_database_prints_the_cause_once_without_postgres_source_lines()
{
    let world = World::new().await;
    let missing = format!("ir_missing_{}", uuid::Uuid::new_v4().simple());
    let url = format!("postgres://postgres@127.0.0.1:5432/{missing}");

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_invoice-reminder"))
        .arg("--config")
        .arg(common::default_config_path())
        .arg("status")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(world.env())
        .env("INVOICE_REMINDER__DATABASE__URL", &url)
        .output()
        .await
        .unwrap();

    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{printed}");
    // The log quotes the database's name; count the cause by its words.
    assert_eq!(printed.matches("does not exist").count(), 1, "{printed}");
    assert!(printed.contains(&missing), "{printed}");
    assert!(!printed.contains("at line"), "{printed}");
    assert!(
        printed.contains("failed to connect to PostgreSQL at"),
        "{printed}"
    );
}

#[tokio::test]
async fn no_command_prints_rust_debug_formatting() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 6).await;
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    // One row in each state a command reports on.
    let states = [
        "UPDATE reminders SET status = 'failed', attempts = 0, last_error = 'not delivered: cut' WHERE invoice_id = $1::text",
        "UPDATE reminders SET status = 'failed', attempts = 2, last_error = 'refused: 451' WHERE invoice_id = $1::text",
        "UPDATE reminders SET status = 'sending', started_at = now(), claimed_at = now() - interval '1 hour',
                last_error = 'delivery unknown' WHERE invoice_id = $1::text",
        "UPDATE reminders SET status = 'sending', started_at = now(), claimed_at = now() - interval '1 hour',
                message_id = NULL, run_id = NULL WHERE invoice_id = $1::text",
        "UPDATE reminders SET status = 'discarded', last_error = 'rejected' WHERE invoice_id = $1::text",
        "UPDATE reminders SET status = 'skipped', last_error = 'suppressed' WHERE invoice_id = $1::text",
    ];
    for (statement, id) in states.into_iter().zip(&ids) {
        sqlx::query(statement)
            .bind(id)
            .execute(world.pool())
            .await
            .unwrap();
    }
    let invoice = ids[2].to_string();
    let customer: i64 = sqlx::query_scalar("SELECT customer_id FROM invoices WHERE id = $1")
        .bind(ids[2])
        .fetch_one(world.pool())
        .await
        .unwrap();
    let customer = customer.to_string();
    let commands: Vec<Vec<&str>> = vec![
        vec!["migrate"],
        vec!["audit"],
        vec!["status"],
        vec!["next"],
        vec!["check-source"],
        vec!["explain", "--invoice", &invoice],
        vec!["explain", "--invoice", &invoice, "--raw"],
        vec!["explain", "--customer", &customer],
        vec!["preview", "--invoice", &invoice],
        vec!["run-once", "--dry-run"],
        vec!["suppress", "add", "gone@example.test", "--reason", "left"],
        vec!["suppress", "list"],
        vec!["suppress", "remove", "gone@example.test"],
        vec!["health"],
        vec!["dkim-record"],
        vec!["resolve", "--resend", &invoice],
        vec!["run-once"],
        vec!["audit"],
        vec!["seed", "--customers", "2", "--invoices", "4"],
    ];
    let mut leaks = Vec::new();
    let mut audited = false;
    for args in &commands {
        let out = cli(&world, args).await;
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        if args == &["audit"] && !audited {
            audited = true;
            assert!(
                text.contains("2 row(s) in 2 mail(s), 1 row(s) with a stored Message-ID"),
                "{text}"
            );
            assert!(text.contains("not attempted yet"), "{text}");
        }
        for leak in ["Some(", "None"] {
            if let Some(at) = text.find(leak) {
                let line = text[..at].rsplit('\n').next().unwrap_or("").to_owned()
                    + text[at..].lines().next().unwrap_or("");
                leaks.push(format!("{}: {line}", args.join(" ")));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "debug formatting in output:\n{}",
        leaks.join("\n")
    );
}
