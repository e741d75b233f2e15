//! Outages at the library level: results that cannot be written, a database
//! that stops answering, a lease lost while waiting for the SMTP pool, and
//! an unknown delivery resent once the run that started it is over.

use std::time::Duration;

use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::proxy::{Mode as ProxyMode, Proxy};
use crate::common::{self, Backend, SmtpMode, World};

/// A trigger that makes recording `sent` fail for `invoice` (or every
/// invoice when None), as a revoked grant or a broken trigger would.
async fn refuse_sent_updates(world: &World, invoice: Option<i64>) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION refuse_sent() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.status = 'sent' AND ({cond}) THEN
             RAISE EXCEPTION 'recording refused for invoice %', NEW.invoice_id;
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_sent BEFORE UPDATE ON reminders FOR EACH ROW EXECUTE FUNCTION refuse_sent();",
        cond = invoice.map_or("true".to_owned(), |id| format!("NEW.invoice_id = '{id}'"))
    )))
    .execute(world.pool())
    .await
    .unwrap();
}

#[tokio::test]
async fn a_record_stage_that_cannot_write_stops_sending_within_the_claim_bound() {
    let mut world = World::new().await;
    world
        .set("reminders.batch_size", 20)
        .set("reminders.send_concurrency", 4);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(2)));
    common::insert_overdue(world.pool(), 300).await;
    refuse_sent_updates(&world, None).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert!(
        matches!(outcome, TickOutcome::RecordFailed(_)),
        "{outcome:?}"
    );
    let mailed = world.sink.count();
    assert!(
        mailed <= 2 * 20,
        "{mailed} mails started although results could not be written"
    );
    let sending = common::count_status(world.pool(), "sending").await;
    assert!(sending <= 2 * 20, "{sending} rows claimed but not recorded");
    let recorded_outcome: Option<String> =
        sqlx::query_scalar("SELECT outcome FROM job_runs ORDER BY id DESC LIMIT 1")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(recorded_outcome.as_deref(), Some("record_failed"));
}

#[tokio::test]
async fn one_bad_held_result_is_dropped_and_the_others_are_written() {
    let mut world = World::new().await;
    // All ten started at once and held at the server, so every send is
    // under way before the first result comes back and fails.
    world
        .set("reminders.batch_size", 10)
        .set("reminders.send_concurrency", 10)
        .set("smtp.pool_size", 10);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(200)));
    let ids = common::insert_overdue(world.pool(), 10).await;
    let bad = ids[3];
    refuse_sent_updates(&world, None).await;
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    assert_eq!(world.sink.count(), 10);
    assert_eq!(
        common::count_status(world.pool(), "sent").await,
        0,
        "no result could be written"
    );

    // Now only the bad one is refused: the next tick writes what it held,
    // row by row around it.
    sqlx::raw_sql("DROP TRIGGER refuse_sent ON reminders; DROP FUNCTION refuse_sent()")
        .execute(world.pool())
        .await
        .unwrap();
    refuse_sent_updates(&world, Some(bad)).await;
    world.sink.set_mode(SmtpMode::Accept);
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(common::count_status(world.pool(), "sent").await, 9);
    let bad_status: String =
        sqlx::query_scalar("SELECT status FROM reminders WHERE invoice_id = $1::text")
            .bind(bad)
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(
        bad_status, "sending",
        "its result could not be written: unknown"
    );
    assert!(
        ctx.deferred.is_empty(),
        "the bad result no longer blocks the queue"
    );
    assert_eq!(world.sink.count(), 10);
}

#[tokio::test]
async fn a_database_that_stops_answering_ends_the_tick_within_the_deadline_and_the_next_tick_recovers()
 {
    let mut world = World::new().await;
    let (proxy, via_proxy) = Proxy::for_postgres(&world.db.url).await;
    world
        .set("database.statement_timeout", "1s")
        .set("database.connect_timeout", "1s")
        .set("reminders.batch_size", 20)
        .set("reminders.send_concurrency", 2);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(20)));
    common::insert_overdue(world.pool(), 200).await;
    let settings = world.settings();
    // As the worker builds its pool: acquiring waits database.connect_timeout.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(5)
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy(&via_proxy)
        .unwrap();
    let ctx = invoice_reminder::tick::context::Context::new(settings, pool).unwrap();
    let ctx = std::sync::Arc::new(ctx);
    let tick = {
        let ctx = ctx.clone();
        tokio::spawn(async move { run_tick(&ctx, &CancellationToken::new()).await })
    };
    world.wait_for_mails(10).await;

    // Bytes are swallowed: no reset, no close, no answer.
    proxy.set_mode(ProxyMode::Stall);
    let ended = tokio::time::timeout(Duration::from_secs(15), tick).await;
    proxy.set_mode(ProxyMode::Pass);

    let ended = ended
        .expect("the tick should end within the statement deadline")
        .unwrap();
    assert!(
        ended.is_err() || matches!(ended, Ok(TickOutcome::RecordFailed(_))),
        "{ended:?}"
    );
    for _ in 0..5 {
        if common::count_status(world.pool(), "sent").await == 200 {
            break;
        }
        let _ = run_tick(&ctx, &CancellationToken::new()).await;
    }
    assert_eq!(common::count_status(world.pool(), "sent").await, 200);
    assert_eq!(
        common::count_status(world.pool(), "sending").await,
        0,
        "nothing left unknown"
    );
    common::assert_no_duplicate_mail(&world.sink);
}
#[tokio::test]
async fn no_mail_starts_after_the_lease_is_lost_even_while_sends_wait_for_the_smtp_pool() {
    let mut world = World::new().await;
    Backend::Redis.configure(&mut world);
    world
        .set("reminders.send_concurrency", 8)
        .set("smtp.pool_size", 1)
        .set("lock.ttl", "1s")
        .set("lock.renew_every", "100ms");
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(300)));
    common::insert_overdue(world.pool(), 40).await;
    let ctx = world.context().await;
    let tick = common::spawn_tick(ctx);
    world.wait_for_mails(2).await;

    let _thief = Backend::Redis.steal(&world).await;
    let stolen_at = std::time::Instant::now();
    let outcome = tick.outcome().await;

    assert!(matches!(outcome, TickOutcome::LockLost(_)), "{outcome:?}");
    // Noticed within one renewal (100 ms); only the one message on the one
    // connection may still finish (300 ms).
    let late = world
        .sink
        .received()
        .iter()
        .filter(|m| m.received_at > stolen_at + Duration::from_millis(450))
        .count();
    assert_eq!(late, 0, "{late} mails started after the lease was lost");
}

#[tokio::test]
async fn a_result_held_while_the_database_refused_it_is_never_resent_by_another_replica() {
    let mut world = World::new().await;
    world.set("reminders.resend_unknown_after", "1ms");
    common::insert_overdue(world.pool(), 3).await;
    refuse_sent_updates(&world, None).await;
    let a = world.context().await;
    let b = world.context().await;
    // Replica A sends all three; the database will not take the results,
    // so A holds them (and its run ends).
    let outcome = run_tick(&a, &CancellationToken::new()).await.unwrap();
    assert!(
        matches!(outcome, TickOutcome::RecordFailed(_)),
        "{outcome:?}"
    );
    assert_eq!(world.sink.count(), 3);
    assert!(!a.deferred.is_empty(), "A holds its results");
    // The database takes writes again; A writes what it holds on its own,
    // while it keeps its run's lease.
    sqlx::raw_sql("DROP TRIGGER refuse_sent ON reminders; DROP FUNCTION refuse_sent()")
        .execute(world.pool())
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let keeper = {
        let (a, stop) = (std::sync::Arc::new(a), stop.clone());
        tokio::spawn(async move {
            a.deferred
                .keep_flushing(&a.db, &a.settings.lock, &stop)
                .await
        })
    };

    // Replica B ticks at once, with resend_unknown_after set.
    run_tick(&b, &CancellationToken::new()).await.unwrap();
    common::wait_until(
        "A wrote its held results",
        Duration::from_secs(10),
        || async { common::count_status(world.pool(), "sent").await == 3 },
    )
    .await;
    run_tick(&b, &CancellationToken::new()).await.unwrap();
    stop.cancel();
    keeper.await.unwrap();

    let mut ids: Vec<String> = world
        .sink
        .received()
        .iter()
        .map(|m| m.header("Message-ID").unwrap().to_owned())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(world.sink.count(), 3, "a held result was resent: {ids:?}");
}

#[tokio::test]
async fn an_unknown_delivery_is_resent_once_the_run_that_started_it_is_over_for_good() {
    let mut world = World::new().await;
    world.set("reminders.resend_unknown_after", "1ms");
    common::insert_overdue(world.pool(), 2).await;
    refuse_sent_updates(&world, None).await;
    let a = world.context().await;
    let outcome = run_tick(&a, &CancellationToken::new()).await.unwrap();
    assert!(matches!(outcome, TickOutcome::RecordFailed(_)));
    // A dies holding its results: nothing keeps its lease.
    drop(a);
    sqlx::raw_sql("DROP TRIGGER refuse_sent ON reminders; DROP FUNCTION refuse_sent()")
        .execute(world.pool())
        .await
        .unwrap();
    common::wait_until(
        "A's run lease is over by the database clock",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, bool>("SELECT bool_and(lease_until < now()) FROM job_runs")
                .fetch_one(world.pool())
                .await
                .unwrap()
        },
    )
    .await;
    let b = world.context().await;

    run_tick(&b, &CancellationToken::new()).await.unwrap();

    assert_eq!(
        world.sink.count(),
        4,
        "sent again, with the same Message-IDs"
    );
    assert_eq!(common::count_status(world.pool(), "sent").await, 2);
}
