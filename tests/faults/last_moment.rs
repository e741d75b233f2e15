//! The last moment decides: a payment signal answered while a paced tick
//! is under way stops the reminders it holds, claimed and marked though
//! they are, in invoice and customer mode, and they go back unattempted;
//! a learnt rate too slow for the backlog ends the tick within its bound.
//! A real `run` serves the signals beside a `run-once` that sends at two
//! messages a second (`smtp.max_per_second`), so the letters wait in the
//! pacer long after their claim and mark.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::Utc;

use crate::common::{self, Backend, World};
use crate::harness;
use crate::signals::{explain, generic, spawn_signals};
use crate::webhook::new_secret;

/// `run-once` in the background; its output when it ends.
pub(crate) fn run_once(world: &World) -> tokio::task::JoinHandle<std::process::Output> {
    let env = world.env();
    tokio::spawn(async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_invoice-reminder"))
            .arg("--config")
            .arg(common::default_config_path())
            .arg("run-once")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env)
            .output()
            .await
            .expect("run-once")
    })
}

/// The invoices of every mail received so far.
pub(crate) fn mailed(world: &World) -> HashSet<i64> {
    world
        .sink
        .received()
        .iter()
        .flat_map(|m| {
            m.header("X-Invoice-Id")
                .unwrap_or_default()
                .split(',')
                .filter_map(|id| id.trim().parse().ok())
                .collect::<Vec<i64>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_signal_after_the_claim_stops_those_reminders_in_a_paced_tick() {
    let mut world = harness::world_for(Backend::Redis).await;
    world.set("smtp.max_per_second", 2);
    let ids = common::insert_overdue(world.pool(), 20).await;
    let secret = new_secret();
    let (mut replica, port) = spawn_signals(&mut world, &[], &secret).await;

    let tick = run_once(&world);
    world.wait_for_mails(1).await;
    // Every row is claimed and marked by now; the last five wait in the
    // pacer, at two a second.
    let held: Vec<i64> = ids[ids.len() - 5..].to_vec();
    for id in &held {
        let answer = generic(port, &secret, &format!("msg_{id}"), *id, "paid", Utc::now()).await;
        assert_eq!(answer, (200, "stored".into()));
    }
    let already = mailed(&world);
    let out = tick.await.unwrap();
    replica.stop_gracefully().await;

    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let waiting: Vec<i64> = held
        .iter()
        .copied()
        .filter(|id| !already.contains(id))
        .collect();
    assert!(
        waiting.len() >= 3,
        "the signals came while those letters waited: {already:?}"
    );
    let after = mailed(&world);
    for id in &waiting {
        assert!(
            !after.contains(id),
            "invoice {id} was mailed after its signal was answered"
        );
    }
    let others: HashSet<i64> = ids[..ids.len() - 5].iter().copied().collect();
    assert!(others.is_subset(&after), "the rest of the tick goes");
    let left: Vec<(String, i32)> =
        sqlx::query_as("SELECT status, attempts FROM reminders WHERE invoice_id = ANY($1)")
            .bind(waiting.iter().map(ToString::to_string).collect::<Vec<_>>())
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert!(
        left.is_empty(),
        "handed back unattempted, no row left: {left:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("withheld={}", waiting.len())),
        "the summary counts them: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let explained = explain(&world, waiting[0]).await;
    assert_eq!(explained["reason"], "held_by_payment_signal", "{explained}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_customer_mode_a_held_invoice_leaves_a_statement_that_waited_and_the_rest_goes() {
    let mut world = harness::world_for(Backend::Redis).await;
    world
        .set("smtp.max_per_second", 2)
        .set("reminders.group_by", "customer");
    // Ten customers with three overdue invoices each.
    let rows: Vec<(i64, i64)> = sqlx::query_as(
        "WITH c AS (INSERT INTO customers (name, email)
                    SELECT 'Customer ' || g, 'c' || g || '@example.test' FROM generate_series(1, 10) g
                    RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT c.id, 'INV-' || c.id || '-' || n, 1000, 'EUR', current_date - 10
           FROM c, generate_series(1, 3) n
         RETURNING customer_id, id",
    )
    .fetch_all(world.pool())
    .await
    .unwrap();
    let secret = new_secret();
    let (mut replica, port) = spawn_signals(&mut world, &[], &secret).await;

    let tick = run_once(&world);
    world.wait_for_mails(1).await;
    let first = mailed(&world);
    // One invoice of each of the last three customers, whose statements wait.
    let mut customers: Vec<i64> = rows.iter().map(|(c, _)| *c).collect();
    customers.dedup();
    let held: Vec<i64> = customers[customers.len() - 3..]
        .iter()
        .filter_map(|c| rows.iter().find(|(cc, _)| cc == c).map(|(_, i)| *i))
        .filter(|i| !first.contains(i))
        .collect();
    for id in &held {
        let answer = generic(
            port,
            &secret,
            &format!("msg_{id}"),
            *id,
            "pending",
            Utc::now(),
        )
        .await;
        assert_eq!(answer, (200, "stored".into()));
    }
    let already = mailed(&world);
    let out = tick.await.unwrap();
    replica.stop_gracefully().await;

    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let waiting: Vec<i64> = held
        .iter()
        .copied()
        .filter(|id| !already.contains(id))
        .collect();
    assert!(
        !waiting.is_empty(),
        "the signals came while those statements waited"
    );
    let after = mailed(&world);
    for id in &waiting {
        assert!(!after.contains(id), "invoice {id} left its statement");
    }
    let all: HashSet<i64> = rows.iter().map(|(_, i)| *i).collect();
    let rest: HashSet<i64> = all
        .difference(&held.iter().copied().collect())
        .copied()
        .collect();
    assert!(rest.is_subset(&after), "the rest of every statement goes");
    assert_eq!(world.sink.count(), 10, "one statement per customer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learnt_rate_too_slow_for_the_backlog_ends_the_tick_within_its_bound_with_the_rest_owed()
{
    let mut world = harness::world_for(Backend::Redis).await;
    world
        .set("schedule.max_tick_duration", "20s")
        .set("shutdown.timeout", "5s");
    common::insert_overdue(world.pool(), 40).await;
    // A rate learnt at 0.05 a second, stored for the relay.
    sqlx::query(
        "INSERT INTO relay_pace (relay, per_second, connections, accepted_per_second, raises, quiet_since)
         VALUES ($1, 0.05, 8, 0.05, 0, now())",
    )
    .bind(format!("127.0.0.1:{}", world.sink.port()))
    .execute(world.pool())
    .await
    .unwrap();

    let started = Instant::now();
    let out = common::cli(&world, &["run-once"]).await;
    let took = started.elapsed();

    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        took < Duration::from_secs(25),
        "within the bound and the shutdown timeout: {took:?}"
    );
    assert!(stderr.contains("throttled"), "{stderr}");
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM reminders GROUP BY 1 ORDER BY 1")
            .fetch_all(world.pool())
            .await
            .unwrap();
    let sent = rows
        .iter()
        .find(|(s, _)| s == "sent")
        .map_or(0, |(_, n)| *n);
    assert_eq!(
        rows,
        [("sent".to_owned(), sent)],
        "none failed, none left sending"
    );
    assert!(
        (5..40).contains(&sent),
        "the rate's floor sends more than 0.05 a second, and the bound leaves the rest owed: {sent}"
    );
}
