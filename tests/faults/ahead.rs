//! A mark is written ahead: while the in-flight limit is full, the next
//! group's mark is already written, in a transaction left open, and takes
//! effect only once the limit has room for it, so the senders wait for its
//! commit at most, never for its statement, and what a SIGKILL leaves
//! unknown stays within the limit (the kill tests in `replicas.rs` and
//! `customers.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use crate::common::proxy::Proxy;
use crate::common::{self, Backend};
use crate::harness;
use crate::last_moment::{mailed, run_once};

/// Rows of a mark written and not committed: locked by the worker's open
/// transaction and, as everyone else sees them, not started. The open
/// transaction is known by its state and its write, not its text: a mark
/// carrying results is longer than `track_activity_query_size` shows.
async fn written_ahead(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "WITH free AS (SELECT id FROM reminders WHERE status = 'sending' FOR SHARE SKIP LOCKED)
         SELECT count(*) FROM reminders r
          WHERE r.status = 'sending' AND r.started_at IS NULL
            AND r.id NOT IN (SELECT id FROM free)
            AND EXISTS (SELECT 1 FROM pg_stat_activity a
                         WHERE a.datname = current_database()
                           AND a.state = 'idle in transaction'
                           AND a.backend_xid IS NOT NULL)",
    )
    .fetch_one(pool)
    .await
    .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_in_flight_limit_is_full_the_next_mark_is_written_and_takes_effect_only_with_room()
 {
    let mut world = harness::world_for(Backend::Redis).await;
    // Two messages a second, four letters in flight, marks of two: the
    // limit is full of letters waiting for the pacer most of the tick.
    world
        .set("smtp.max_per_second", 2)
        .set("reminders.send_concurrency", 4);
    let ids = common::insert_overdue(world.pool(), 12).await;

    let tick = run_once(&world);
    world.wait_for_mails(1).await;
    let seen = AtomicI64::new(0);
    common::wait_until(
        "a mark written ahead, its rows locked and not started",
        Duration::from_secs(20),
        || async {
            let rows = written_ahead(world.pool()).await;
            seen.store(rows, Ordering::SeqCst);
            rows > 0
        },
    )
    .await;
    let seen = seen.load(Ordering::SeqCst);
    assert!(seen <= 2, "a mark takes at most a group (2): {seen}");
    let out = tick.await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Every mark written ahead took effect once, with its room: each
    // invoice mailed once and recorded sent.
    let mut times: HashMap<i64, usize> = HashMap::new();
    for id in world.sink.received().iter().flat_map(|m| {
        m.header("X-Invoice-Id")
            .unwrap_or_default()
            .split(',')
            .filter_map(|id| id.trim().parse::<i64>().ok())
            .collect::<Vec<_>>()
    }) {
        *times.entry(id).or_default() += 1;
    }
    assert!(times.values().all(|n| *n == 1), "{times:?}");
    assert_eq!(mailed(&world), ids.iter().copied().collect());
    let sent: i64 = sqlx::query_scalar("SELECT count(*) FROM reminders WHERE status = 'sent'")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(sent, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_letters_waiting_for_the_next_mark_its_transaction_begins_with_the_last_commit() {
    let mut world = harness::world_for(Backend::Redis).await;
    let (proxy, via_proxy) = Proxy::for_postgres(&world.db.url).await;
    world
        .set("database.url", via_proxy)
        .set("smtp.max_per_second", 20)
        .set("reminders.send_concurrency", 4);
    let ids = common::insert_overdue(world.pool(), 12).await;
    let chained = proxy.count_sent(b"COMMIT; BEGIN");

    let out = run_once(&world).await.unwrap();

    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Six marks of two letters from one page of twelve: each of the first
    // five commits with letters waiting for the next mark, and begins that
    // mark's transaction in the same round trip.
    let chained = chained.load(Ordering::SeqCst);
    assert!(
        (3..=5).contains(&chained),
        "{chained} commits began the next mark's transaction"
    );
    // And each mark in such a transaction took effect once, at its own
    // commit: every invoice mailed once and recorded sent.
    assert_eq!(world.sink.count(), 12);
    common::assert_no_duplicate_mail(&world.sink);
    assert_eq!(mailed(&world), ids.iter().copied().collect());
    assert_eq!(common::count_status(world.pool(), "sent").await, 12);
}
