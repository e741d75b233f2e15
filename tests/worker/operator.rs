//! What an operator runs when something is off: `next` to see when the
//! schedule fires, `resolve` to settle unknown deliveries, and the errors
//! they get for wrong credentials.

use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

async fn tick(world: &World) {
    run_tick(&world.context().await, &CancellationToken::new())
        .await
        .unwrap();
}

#[tokio::test]
async fn next_prints_the_schedules_fires_across_daylight_saving_from_the_code_run_uses() {
    let mut world = World::new().await;
    world
        .set("schedule.cron", "0 0 9 * * Mon-Fri")
        .set("schedule.timezone", "Europe/Madrid");

    let text = common::cli(
        &world,
        &["next", "--from", "2027-03-25T12:00:00Z", "--count", "3"],
    )
    .await;
    let json = common::cli(
        &world,
        &[
            "next",
            "--from",
            "2027-03-25T12:00:00Z",
            "--count",
            "2",
            "--json",
        ],
    )
    .await;
    let bad = common::cli(&world, &["next", "--from", "yesterday"]).await;

    assert_eq!(text.status.code(), Some(0));
    assert_eq!(
        common::stdout(&text),
        "2027-03-26T09:00:00+01:00 2027-03-26T08:00:00Z\n\
         2027-03-29T09:00:00+02:00 2027-03-29T07:00:00Z\n\
         2027-03-30T09:00:00+02:00 2027-03-30T07:00:00Z\n"
    );
    let fires: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        fires,
        serde_json::json!([
            {"local": "2027-03-26T09:00:00+01:00", "utc": "2027-03-26T08:00:00Z"},
            {"local": "2027-03-29T09:00:00+02:00", "utc": "2027-03-29T07:00:00Z"},
        ])
    );
    assert_eq!(bad.status.code(), Some(2));
}

/// Makes the reminder of `invoice` look like an unknown delivery: started,
/// left `sending` by a run that has ended.
async fn make_unknown(world: &World, invoice: i64) -> i64 {
    sqlx::query_scalar(
        "UPDATE reminders SET status = 'sending', sent_at = NULL, message_id = NULL
          WHERE invoice_id = $1::text RETURNING id",
    )
    .bind(invoice)
    .fetch_one(world.pool())
    .await
    .unwrap()
}

async fn status_of(world: &World, reminder: i64) -> String {
    sqlx::query_scalar("SELECT status FROM reminders WHERE id = $1")
        .bind(reminder)
        .fetch_one(world.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn resolve_settles_unknown_deliveries_and_refuses_everything_else() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 4).await;
    tick(&world).await;
    let went_out = make_unknown(&world, ids[0]).await;
    let lost = make_unknown(&world, ids[1]).await;
    let superseded = make_unknown(&world, ids[2]).await;
    let delivered: i64 = sqlx::query_scalar("SELECT id FROM reminders WHERE invoice_id = $1::text")
        .bind(ids[3])
        .fetch_one(world.pool())
        .await
        .unwrap();
    // Invoice 3's due step moves on to "final" before anyone looks.
    sqlx::query("UPDATE invoices SET due_date = due_date - 20 WHERE id = $1")
        .bind(ids[2])
        .execute(world.pool())
        .await
        .unwrap();
    let mails_before = world.sink.count();

    let sent = common::cli(&world, &["resolve", "--sent", &went_out.to_string()]).await;
    let resend = common::cli(&world, &["resolve", "--resend", &lost.to_string()]).await;
    let refused = common::cli(
        &world,
        &[
            "resolve",
            "--resend",
            &superseded.to_string(),
            &delivered.to_string(),
        ],
    )
    .await;
    tick(&world).await;

    assert_eq!(
        sent.status.code(),
        Some(0),
        "{}{}",
        common::stdout(&sent),
        String::from_utf8_lossy(&sent.stderr)
    );
    assert!(common::stdout(&sent).contains("unknown -> sent"));
    assert_eq!(status_of(&world, went_out).await, "sent");
    assert_eq!(resend.status.code(), Some(0), "{}", common::stdout(&resend));
    assert_eq!(
        status_of(&world, lost).await,
        "sent",
        "the next tick sent it again"
    );
    let resent = &world.sink.received()[mails_before..];
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].invoice_id(), Some(ids[1]));
    assert!(
        resent[0]
            .header("Message-ID")
            .is_some_and(|m| m.contains(&format!("invoice-{}.overdue@", ids[1]))),
        "the same Message-ID: {:?}",
        resent[0].header("Message-ID")
    );
    let refusal = common::stdout(&refused);
    assert_eq!(refused.status.code(), Some(1), "{refusal}");
    assert!(
        refusal.contains("no longer due (due step now: final)"),
        "{refusal}"
    );
    assert!(refusal.contains("not unknown (status sent)"), "{refusal}");
    assert_eq!(
        status_of(&world, superseded).await,
        "sending",
        "left for the operator"
    );
}

#[tokio::test]
async fn resolve_never_settles_a_row_whose_finished_run_may_still_write_its_result() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 1).await;
    tick(&world).await;
    let row = make_unknown(&world, ids[0]).await;
    // Its run finished, but its process still holds results the database
    // would not take (a deferred `sent`): the run keeps its lease.
    let holding = |until: &'static str| {
        sqlx::query(
            "UPDATE job_runs SET lease_until = now() + $1::interval
              WHERE id = (SELECT run_id FROM reminders WHERE id = $2)",
        )
        .bind(until)
        .bind(row)
    };
    holding("1 hour").execute(world.pool()).await.unwrap();

    let refused = common::cli(&world, &["resolve", "--resend", &row.to_string()]).await;
    let unknown_before = common::cli(&world, &["audit", "--json"]).await;
    holding("-1 second").execute(world.pool()).await.unwrap();
    let settled = common::cli(&world, &["resolve", "--resend", &row.to_string()]).await;

    assert_eq!(
        refused.status.code(),
        Some(1),
        "{}",
        common::stdout(&refused)
    );
    assert!(
        common::stdout(&refused).contains("not unknown"),
        "{}",
        common::stdout(&refused)
    );
    let report: serde_json::Value = serde_json::from_slice(&unknown_before.stdout).unwrap();
    assert_eq!(
        report["unknown"].as_array().map(Vec::len),
        Some(0),
        "audit does not list it as unknown either: {report}"
    );
    assert_eq!(
        settled.status.code(),
        Some(0),
        "{}",
        common::stdout(&settled)
    );
    assert_eq!(
        status_of(&world, row).await,
        "failed",
        "once the lease is over"
    );
}

#[tokio::test]
async fn with_resend_unknown_after_an_old_unknown_delivery_is_sent_again_with_its_message_id() {
    let mut world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 2).await;
    tick(&world).await;
    let unknown = make_unknown(&world, ids[0]).await;
    tick(&world).await;
    assert_eq!(world.sink.count(), 2, "off by default: never resent");
    sqlx::query("UPDATE reminders SET claimed_at = now() - interval '3 hours' WHERE id = $1")
        .bind(unknown)
        .execute(world.pool())
        .await
        .unwrap();
    world.set("reminders.resend_unknown_after", "2h");

    tick(&world).await;

    assert_eq!(world.sink.count(), 3);
    assert_eq!(world.sink.received()[2].invoice_id(), Some(ids[0]));
    assert_eq!(status_of(&world, unknown).await, "sent");
}

#[tokio::test]
async fn a_wrong_redis_password_is_one_configuration_error_naming_redis_url() {
    let world = World::new().await;
    let user = format!("ir-test-{}", uuid::Uuid::new_v4().simple());
    let mut redis = common::redis_conn().await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", &user, "on", ">right", "~*", "+@all"])
        .query_async(&mut redis)
        .await
        .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_invoice-reminder"))
        .arg("run-once")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(world.env())
        .env(
            "INVOICE_REMINDER__REDIS__URL",
            format!("redis://{user}:hunter2@127.0.0.1:6379"),
        )
        .output()
        .await
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["DELUSER", &user])
        .query_async(&mut redis)
        .await
        .unwrap();

    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("redis.url") && stderr.contains("refused our credentials"),
        "{stderr}"
    );
    assert!(stderr.contains(":***@"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(
        !stderr.contains("result unknown"),
        "no ambiguity path: {stderr}"
    );
}

/// A view of the demo invoices that takes `seconds` to read, however few
/// rows it has.
async fn use_slow_view(world: &mut World, seconds: f64) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA slow;
         CREATE VIEW slow.invoices AS
         SELECT * FROM invoice_reminder.reminder_source WHERE pg_sleep({seconds}) IS NOT NULL;"
    )))
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "slow.invoices");
}

#[tokio::test]
async fn a_command_that_runs_into_its_deadline_names_the_key_to_raise_and_never_suggests_migrate() {
    let mut world = World::new().await;
    common::insert_overdue(world.pool(), 1).await;
    use_slow_view(&mut world, 1.0).await;
    world.set("database.command_timeout", "300ms");

    let out = common::cli(&world, &["audit"]).await;

    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("database.command_timeout (300ms)"),
        "{stderr}"
    );
    assert!(!stderr.contains("migrate"), "{stderr}");
}

#[tokio::test]
async fn a_slow_statement_is_not_printed_into_the_operators_log() {
    let mut world = World::new().await;
    common::insert_overdue(world.pool(), 1).await;
    // sqlx reports statements slower than a second.
    use_slow_view(&mut world, 1.2).await;

    let out = common::cli(&world, &["audit"]).await;

    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("slow statement"), "{stderr}");
    assert!(!stderr.contains("SELECT"), "{stderr}");
}
