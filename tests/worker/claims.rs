//! The database backstop: claims, periods, retries of the same period.

use std::time::Duration;

use invoice_reminder::db;
use invoice_reminder::domain::{Attempted, Delivery, InvoiceId, Proof};
use invoice_reminder::lock::LeaseGuard;
use invoice_reminder::tick::{TickOutcome, run_tick, work_period};
use tokio_util::sync::CancellationToken;

use crate::common::{self, SmtpMode, World};

#[tokio::test]
async fn one_tick_sends_one_reminder_per_overdue_invoice_and_records_the_run() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 25).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let TickOutcome::Done(summary) = outcome else {
        panic!("expected Done, got {outcome:?}");
    };
    assert_eq!(
        (
            summary.counts.claimed,
            summary.counts.sent,
            summary.counts.failed
        ),
        (25, 25, 0)
    );
    let mut mailed = world.sink.invoice_ids();
    mailed.sort();
    assert_eq!(mailed, ids);
    assert_eq!(common::count_status(world.pool(), "sent").await, 25);
    let runs = db::runs::recent_runs(&world.database(), 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome.as_deref(), Some("done"));
    assert_eq!((runs[0].claimed, runs[0].sent, runs[0].failed), (25, 25, 0));
    assert!(runs[0].finished_at.is_some());
    assert_eq!(runs[0].run_date, summary.run_date);
}

#[tokio::test]
async fn a_second_tick_in_the_same_period_sends_nothing() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 10).await;
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    assert_eq!(world.sink.count(), 10);

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(
        outcome.summary().map(|s| (s.counts.claimed, s.counts.sent)),
        Some((0, 0))
    );
    assert_eq!(world.sink.count(), 10);
}

#[tokio::test]
async fn two_ticks_racing_on_the_same_data_send_each_reminder_once() {
    let mut world = World::new().await;
    world.set("reminders.batch_size", 20);
    let ids = common::insert_overdue(world.pool(), 200).await;
    let (a, b) = (world.context().await, world.context().await);
    let stop = CancellationToken::new();

    let (ra, rb) = tokio::join!(run_tick(&a, &stop), run_tick(&b, &stop));
    ra.unwrap();
    rb.unwrap();
    // Whichever lost the race for the lock may run again now: still nothing new.
    run_tick(&b, &stop).await.unwrap();

    common::assert_no_duplicate_mail(&world.sink);
    assert_eq!(world.sink.count(), ids.len());
    assert_eq!(common::count_status(world.pool(), "sent").await, 200);
}

#[tokio::test]
async fn with_the_lock_bypassed_concurrent_ticks_still_send_each_reminder_once() {
    // Four replicas that all believe they hold the lock (no lock at all):
    // only the UNIQUE (invoice_id, period) claim stands between them.
    let mut world = World::new().await;
    world
        .set("reminders.batch_size", 10)
        .set("reminders.send_concurrency", 2);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(2)));
    common::insert_overdue(world.pool(), 300).await;
    let mut replicas = Vec::new();
    for _ in 0..4 {
        replicas.push(world.context().await);
    }
    let stop = CancellationToken::new();
    let guard = LeaseGuard::unbounded();

    let results = futures::future::join_all(
        replicas
            .iter()
            .map(|ctx| work_period(ctx, None, &guard, &stop)),
    )
    .await;

    let mut claimed_by_each = Vec::new();
    for r in results {
        claimed_by_each.push(r.unwrap().summary().unwrap().counts.claimed);
    }
    common::assert_no_duplicate_mail(&world.sink);
    assert_eq!(world.sink.count(), 300);
    assert_eq!(
        claimed_by_each.iter().sum::<u32>(),
        300,
        "claims: {claimed_by_each:?}"
    );
    assert!(
        claimed_by_each.iter().filter(|&&c| c > 0).count() > 1,
        "the replicas did not actually race: {claimed_by_each:?}"
    );
}

#[tokio::test]
async fn a_claim_refuses_an_invoice_already_claimed_or_paid_since_it_was_listed() {
    let world = World::new().await;
    let owed = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    let paid = common::insert_invoice(world.pool(), "B", "b@example.test", 10, true).await;
    let run = common::start_unlocked_run(&world.database()).await;

    let ids = [InvoiceId::from(owed), InvoiceId::from(paid)];
    let (_, today) = common::window(world.pool(), "overdue").await;
    let first = db::claims::claim_steps(&world.database(), &ids, &today, run, None)
        .await
        .unwrap();
    let second = db::claims::claim_steps(&world.database(), &ids, &today, run, None)
        .await
        .unwrap();

    assert_eq!(
        first
            .claimed
            .iter()
            .filter_map(|c| c.source.invoice_id.clone())
            .collect::<Vec<_>>(),
        vec![InvoiceId::from(owed)]
    );
    assert!(second.claimed.is_empty());
}

#[tokio::test]
async fn one_claim_takes_invoices_owing_different_steps_each_for_its_own_step() {
    let world = World::new().await;
    let overdue = common::insert_invoice(world.pool(), "A", "a@example.test", 5, false).await;
    let last = common::insert_invoice(world.pool(), "B", "b@example.test", 25, false).await;
    let run = common::start_unlocked_run(&world.database()).await;
    let (_, owed) = common::window(world.pool(), "overdue").await;
    let owed = db::owing::OwingDay::from_settings(&world.settings(), owed.now, owed.date);

    let ids = [InvoiceId::from(overdue), InvoiceId::from(last)];
    let claim = db::claims::claim_steps(&world.database(), &ids, &owed, run, None)
        .await
        .unwrap();

    let mut steps: Vec<(Option<InvoiceId>, invoice_reminder::domain::StepKey)> = claim
        .claimed
        .iter()
        .map(|c| (c.source.invoice_id.clone(), c.step.clone()))
        .collect();
    steps.sort();
    assert_eq!(
        steps,
        vec![
            (Some(InvoiceId::from(overdue)), "overdue".into()),
            (Some(InvoiceId::from(last)), "final".into()),
        ]
    );
}

#[tokio::test]
async fn results_handed_over_in_any_order_each_settle_their_own_row() {
    let world = World::new().await;
    let invoices = common::insert_overdue(world.pool(), 3).await;
    let run = common::start_unlocked_run(&world.database()).await;
    let (_, owed) = common::window(world.pool(), "overdue").await;
    let ids: Vec<InvoiceId> = invoices.iter().map(|&i| InvoiceId::from(i)).collect();
    let mut claimed = db::claims::claim_steps(&world.database(), &ids, &owed, run, None)
        .await
        .unwrap()
        .claimed;
    assert_eq!(claimed.len(), 3);
    db::deliveries::mark_started(
        &world.database(),
        run,
        &claimed.iter().map(|c| c.id).collect::<Vec<_>>(),
        &claimed
            .iter()
            .map(|c| format!("m{}@test", c.id))
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();

    // Newest row first: the statement must not rely on the order it is given.
    claimed.sort_by_key(|c| std::cmp::Reverse(c.id));
    let outcomes = [
        Delivery::Sent {
            message_id: "<newest@example.test>".into(),
            proof: Proof {
                reply: "250 2.0.0 Ok: queued as N".into(),
                sha256: [7; 32],
                archived: None,
                refused: Vec::new(),
            },
        },
        Delivery::Failed {
            error: "451 try later".into(),
        },
        Delivery::Discarded {
            error: "550 no such user".into(),
        },
    ];
    let attempted: Vec<Attempted> = claimed
        .iter()
        .zip(outcomes)
        .map(|(c, delivery)| Attempted {
            id: c.id,
            invoice: c.source.invoice_id.clone().unwrap_or_default(),
            step: c.step.clone(),
            attempts_before: c.attempts,
            message_id: format!("m{}@test", c.id),
            delivery,
        })
        .collect();
    db::deliveries::record_deliveries(&world.database(), run, 5, &attempted)
        .await
        .unwrap();

    let rows: Vec<(i64, String, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT id, status, message_id, last_error FROM reminders ORDER BY id DESC")
            .fetch_all(world.pool())
            .await
            .unwrap();
    let oldest = rows.last().map(|r| r.0).unwrap_or_default();
    assert_eq!(
        rows.into_iter()
            .map(|(_, status, message_id, error)| (status, message_id, error))
            .collect::<Vec<_>>(),
        vec![
            (
                "sent".to_owned(),
                Some("<newest@example.test>".to_owned()),
                None
            ),
            // Refused for now: its retry may go in another mail.
            ("failed".to_owned(), None, Some("451 try later".to_owned())),
            // Refused for good: it keeps the Message-ID its mail carried.
            (
                "discarded".to_owned(),
                Some(format!("m{oldest}@test")),
                Some("550 no such user".to_owned())
            ),
        ]
    );
}

#[tokio::test]
async fn paid_invoices_and_invoices_before_their_first_step_get_no_reminder() {
    let world = World::new().await;
    let overdue = common::insert_invoice(world.pool(), "A", "a@example.test", 4, false).await;
    common::insert_invoice(world.pool(), "C", "c@example.test", 30, true).await; // paid
    common::insert_invoice(world.pool(), "D", "d@example.test", -5, false).await; // 5 days before due
    let ctx = world.context().await;

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(world.sink.invoice_ids(), vec![overdue]);
}

#[tokio::test]
async fn today_is_the_database_date_in_the_configured_time_zone() {
    // UTC+14 and UTC-12 are always on different dates.
    let mut ahead = World::new().await;
    ahead.set("schedule.timezone", "Pacific/Kiritimati");
    let mut behind = World::new().await;
    behind.set("schedule.timezone", "Etc/GMT+12");
    let mut days = Vec::new();
    for (world, zone) in [(&ahead, "Pacific/Kiritimati"), (&behind, "Etc/GMT+12")] {
        common::insert_overdue(world.pool(), 1).await;
        let ctx = world.context().await;
        let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
        let run_date = outcome.summary().unwrap().run_date.clone();
        let expected: chrono::NaiveDate =
            sqlx::query_scalar("SELECT (now() AT TIME ZONE $1)::date")
                .bind(zone)
                .fetch_one(world.pool())
                .await
                .unwrap();
        assert_eq!(
            run_date,
            expected.to_string(),
            "job_runs.run_date is the tick's today"
        );
        assert_eq!(
            world.sink.received()[0].period().as_deref(),
            Some("overdue")
        );
        days.push(run_date);
    }

    assert_ne!(days[0], days[1]);
}

#[tokio::test]
async fn a_dry_run_lists_what_would_be_sent_and_claims_nothing() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 5).await;
    let ctx = world.context().await;

    let plan = invoice_reminder::commands::dry_run(&ctx, 100)
        .await
        .unwrap();

    let mut listed: Vec<i64> = plan
        .would_send
        .iter()
        .map(|r| r.invoice_id.0.parse().unwrap())
        .collect();
    listed.sort();
    assert_eq!(listed, ids);
    assert!(common::statuses(world.pool()).await.is_empty());
    assert_eq!(world.sink.count(), 0);
}

#[tokio::test]
async fn overdue_invoices_are_paged_through_in_batches() {
    let mut world = World::new().await;
    world.set("reminders.batch_size", 7);
    common::insert_overdue(world.pool(), 50).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(outcome.summary().unwrap().counts.sent, 50);
    assert_eq!(world.sink.count(), 50);
}
