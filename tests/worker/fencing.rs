//! Fencing tokens: a holder whose lock was taken over cannot claim a single
//! row, even if nothing in the process noticed the loss (the pause fell
//! between its last lease check and its claim); a token drawn and never used
//! still raises the floor; two holders with one number cannot both write.

use std::time::Duration;

use invoice_reminder::db;
use invoice_reminder::db::locks::Fence;
use invoice_reminder::db::reminders::ClaimError;
use invoice_reminder::db::runs::NewRun;
use invoice_reminder::domain::InvoiceId;
use invoice_reminder::lock::{Acquisition, LostReason};
use invoice_reminder::tick::{TickLock, TickOutcome, work_period};
use tokio_util::sync::CancellationToken;

use crate::common::{self, Backend, World};
use crate::for_each_backend;

for_each_backend!(
    a_holder_whose_lock_was_taken_over_cannot_claim_a_single_row,
    fencing_tokens_grow_with_every_acquisition,
);

async fn a_holder_whose_lock_was_taken_over_cannot_claim_a_single_row(backend: Backend) {
    let mut world = World::new().await;
    backend.configure(&mut world);
    // A watchdog too slow to notice within this test: only fencing can stop A.
    world.set("lock.ttl", "60s").set("lock.renew_every", "30s");
    let invoices = common::insert_overdue(world.pool(), 20).await;
    let (a, b) = (world.context().await, world.context().await);

    let Acquisition::Acquired(stale) = a
        .lock
        .try_acquire(common::fence_floor(&world).await)
        .await
        .unwrap()
    else {
        panic!("A acquires the free lock");
    };
    // A "pauses"; its lock is lost and B takes over and writes one claim.
    backend.break_lock(&world).await;
    let Acquisition::Acquired(fresh) = b
        .lock
        .try_acquire(common::fence_floor(&world).await)
        .await
        .unwrap()
    else {
        panic!("B acquires after A lost the lock");
    };
    assert!(
        fresh.fence() > stale.fence(),
        "{} > {}",
        fresh.fence(),
        stale.fence()
    );
    let key = world.lock_key();
    let run_b = db::runs::start_run(
        &world.database(),
        NewRun {
            replica_id: "b",
            lock: Some((fresh.token(), fresh.fence(), &key)),
            run_date: "2026-11-30",
            lease: None,
        },
    )
    .await
    .unwrap();
    let fence_b = Fence {
        lock_key: &key,
        token: fresh.fence(),
        holder: fresh.token(),
    };
    let (_, today) = common::window(world.pool(), "overdue").await;
    let by_b = db::claims::claim_steps(
        &world.database(),
        &ids(&invoices[..5]),
        &today,
        run_b,
        Some(fence_b),
    )
    .await
    .unwrap();
    assert_eq!(by_b.claimed.len(), 5);

    // A wakes up, still trusting its lease by its own clock, and works.
    assert!(
        stale.guard().check().is_ok(),
        "nothing in A noticed the loss"
    );
    let tick_lock = TickLock {
        lock_token: stale.token(),
        fence: Fence {
            lock_key: &key,
            token: stale.fence(),
            holder: stale.token(),
        },
    };
    let outcome = work_period(
        &a,
        Some(tick_lock),
        &stale.guard(),
        &CancellationToken::new(),
    )
    .await
    .unwrap();

    assert!(
        matches!(outcome, TickOutcome::LockLost(ref s) if s.counts.claimed == 0),
        "{outcome:?}"
    );
    assert_eq!(stale.guard().lost_reason(), Some(LostReason::Fenced));
    assert_eq!(world.sink.count(), 0, "the stale holder sent mail");
    let claimed_by_a: i64 =
        sqlx::query_scalar("SELECT count(*) FROM reminders WHERE fence_token = $1")
            .bind(stale.fence())
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(claimed_by_a, 0);
    // The stale token is refused outright, too.
    let refused = db::claims::claim_steps(
        &world.database(),
        &ids(&invoices[5..]),
        &today,
        run_b,
        Some(Fence {
            lock_key: &key,
            token: stale.fence(),
            holder: stale.token(),
        }),
    )
    .await;
    assert!(
        matches!(refused, Err(ClaimError::Fenced { .. })),
        "{refused:?}"
    );
    drop(stale);
    fresh.release().await.unwrap();
}

async fn fencing_tokens_grow_with_every_acquisition(backend: Backend) {
    let mut world = World::new().await;
    backend.configure(&mut world);
    let ctx = world.context().await;
    let mut last = 0;
    for _ in 0..3 {
        let Acquisition::Acquired(lease) = ctx.lock.try_acquire(0).await.unwrap() else {
            panic!("acquire the free lock");
        };
        assert!(lease.fence() > last, "{} after {last}", lease.fence());
        last = lease.fence();
        lease.release().await.unwrap();
    }
    // A floor from the database lifts the next token above it (a Redis that
    // restarted empty would otherwise start counting again from 1).
    let floor = last + 1000;
    let Acquisition::Acquired(lease) = ctx.lock.try_acquire(floor).await.unwrap() else {
        panic!("acquire the free lock");
    };
    assert!(
        lease.fence() > floor,
        "{} above the floor {floor}",
        lease.fence()
    );
    lease.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), ctx.lock.finish())
        .await
        .unwrap();
}

fn ids(invoices: &[i64]) -> Vec<InvoiceId> {
    invoices.iter().copied().map(InvoiceId::from).collect()
}

#[tokio::test]
async fn a_token_drawn_but_never_used_to_claim_still_raises_the_fencing_floor() {
    let mut world = World::new().await;
    Backend::Redis.configure(&mut world);
    let ctx = world.context().await;
    let key = world.lock_key();
    let mut drawn = 0;
    for _ in 0..3 {
        let Acquisition::Acquired(lease) = ctx
            .lock
            .try_acquire(common::fence_floor(&world).await)
            .await
            .unwrap()
        else {
            panic!("lock should be free");
        };
        drawn = lease.fence();
        // A run records its token before its first claim; this one never claims.
        db::runs::start_run(
            &world.database(),
            db::runs::NewRun {
                replica_id: "quiet",
                lock: Some((lease.token(), lease.fence(), &key)),
                run_date: "2026-11-30",
                lease: None,
            },
        )
        .await
        .unwrap();
        lease.release().await.unwrap();
    }
    // Redis loses its counter (restarted empty, or the key was evicted).
    let mut redis = common::redis_conn().await;
    let _: () = redis::cmd("DEL")
        .arg(format!("{key}:fence"))
        .query_async(&mut redis)
        .await
        .unwrap();

    let floor = common::fence_floor(&world).await;
    let Acquisition::Acquired(lease) = ctx.lock.try_acquire(floor).await.unwrap() else {
        panic!("lock should be free");
    };

    assert!(
        lease.fence() > drawn,
        "new token {} must exceed every token drawn ({drawn})",
        lease.fence()
    );
}

#[tokio::test]
async fn two_holders_carrying_one_fencing_number_cannot_both_write() {
    let world = World::new().await;
    let database = world.database();
    let key = world.lock_key();
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let mut conn = world.pool().acquire().await.unwrap();
    let write = |holder| Fence {
        lock_key: &key,
        token: 7,
        holder,
    };

    let first = db::locks::advance_fence(&mut conn, &database, write(a))
        .await
        .unwrap();
    let other = db::locks::advance_fence(&mut conn, &database, write(b))
        .await
        .unwrap();
    let again = db::locks::advance_fence(&mut conn, &database, write(a))
        .await
        .unwrap();

    assert!(first, "the first holder of 7 writes");
    assert!(!other, "a second holder of the same number is refused");
    assert!(again, "the first holder may keep writing");
}
