//! Results the database could not take during a tick are written before
//! the process exits, or logged with their Message-IDs when they cannot be,
//! so mail the server accepted while PostgreSQL was away is never left as
//! `sending` without a line that names it.

use std::collections::HashSet;
use std::time::Duration;

use crate::common::proxy::Proxy;
use crate::common::{self, Backend, SmtpMode, World};
use crate::harness::{self, Replica, ReplicaOptions};

/// A world whose replicas reach PostgreSQL through `proxy`, sending slowly
/// enough that the database can be taken away mid-tick.
async fn world_behind_proxy() -> (World, Proxy) {
    let mut world = harness::world_for(Backend::Redis).await;
    let (proxy, via) = Proxy::for_postgres(&world.db.url).await;
    world
        .set("database.url", via)
        .set("database.statement_timeout", "2s")
        .set("reminders.batch_size", 20)
        .set("reminders.send_concurrency", 2);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(20)));
    common::insert_overdue(world.pool(), 300).await;
    (world, proxy)
}

/// Waits for mail, then takes the database away and waits until the tick
/// has noticed (it stops starting mail).
async fn lose_the_database_mid_tick(world: &World, proxy: &Proxy, replica: &Replica) {
    common::wait_until("twenty mails arrive", Duration::from_secs(30), || async {
        world.sink.count() >= 20
    })
    .await;
    proxy.go_down();
    common::wait_until(
        "the tick notices the database is gone",
        Duration::from_secs(15),
        || async {
            let log = replica.log();
            log.contains("cannot be written") || log.contains("cannot be marked started")
        },
    )
    .await;
}

/// The (invoice, period) of every received mail whose row is not `sent`.
async fn received_but_not_sent(world: &World) -> Vec<(i64, String)> {
    let sent: HashSet<(i64, String)> = sqlx::query_as::<_, (i64, String)>(
        "SELECT invoice_id::bigint, period::text FROM reminders WHERE status = 'sent'",
    )
    .fetch_all(world.pool())
    .await
    .expect("sent rows")
    .into_iter()
    .collect();
    world
        .sink
        .received()
        .iter()
        .filter_map(|m| Some((m.invoice_id()?, m.period()?)))
        .filter(|key| !sent.contains(key))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_while_the_database_is_away_writes_its_results_when_it_returns_before_exiting()
 {
    let (world, proxy) = world_behind_proxy().await;
    let mut replica = Replica::spawn(&world, "r1", ReplicaOptions::default());
    lose_the_database_mid_tick(&world, &proxy, &replica).await;

    replica.terminate();
    // Back within the exit's bounded wait (10 s).
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.come_up().await;
    let status = replica
        .wait_exit(Duration::from_secs(30))
        .await
        .expect("exits");

    assert_eq!(status.code(), Some(0), "{}", replica.log());
    assert_eq!(
        received_but_not_sent(&world).await,
        vec![],
        "every mail the server accepted is recorded as sent"
    );
    assert_eq!(harness::tally(&world).await.sending, 0, "{}", replica.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_that_cannot_write_its_results_before_exit_logs_each_message_id_and_fails() {
    let (world, proxy) = world_behind_proxy().await;
    let mut replica = Replica::spawn(
        &world,
        "once",
        ReplicaOptions {
            command: vec!["run-once".into()],
            ..ReplicaOptions::default()
        },
    );
    lose_the_database_mid_tick(&world, &proxy, &replica).await;
    // The database stays away past the exit's bounded wait.
    let status = replica
        .wait_exit(Duration::from_secs(40))
        .await
        .expect("exits after its bounded wait");
    drop(proxy);

    let log = replica.log();
    assert_ne!(status.code(), Some(0), "{log}");
    assert!(log.contains("could not be written before exit"), "{log}");
    let unwritten = received_but_not_sent(&world).await;
    let logged: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("result not written"))
        .collect();
    // Some results were held. A held result's statement may have committed
    // with its reply lost (the row is `sent` then), so the log is the
    // measure, not the table; each line names mail the server received.
    assert!(!logged.is_empty(), "some results were held: {log}");
    let received: Vec<String> = world
        .sink
        .received()
        .iter()
        .filter_map(|m| m.header("Message-ID"))
        .map(|h| h.trim_matches(['<', '>']).to_owned())
        .collect();
    for line in &logged {
        assert!(
            received
                .iter()
                .any(|id| line.contains(&format!("message_id={id}"))),
            "a logged result names no mail the server received: {line}"
        );
    }
    for (invoice, period) in &unwritten {
        let message_id = world
            .sink
            .received()
            .iter()
            .find(|m| m.invoice_id() == Some(*invoice) && m.period().as_deref() == Some(period))
            .and_then(|m| {
                m.header("Message-ID")
                    .map(|h| h.trim_matches(['<', '>']).to_owned())
            })
            .expect("the mail carries a Message-ID");
        assert!(
            logged.iter().any(|l| l.contains(&message_id)
                && l.contains(&format!("invoice_id={invoice}"))
                && l.contains(period)
                && l.contains("outcome=\"sent\"")),
            "no error line for invoice {invoice} ({message_id}):\n{}",
            logged.join("\n")
        );
    }
}
