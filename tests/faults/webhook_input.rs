//! The bounce webhook's edges on a real `run` process: correctly signed
//! requests whose timestamps are the ends of `i64`, and soft bounces'
//! message ids, which expire like every other.

use crate::common::Backend;
use crate::harness;
use crate::webhook::{bounce, new_secret, now, post, signed, spawn_webhook};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correctly_signed_webhook_stamped_i64_min_or_max_gets_401_and_suppresses_nothing() {
    let world = harness::world_for(Backend::Redis).await;
    let secret = new_secret();
    let (mut replica, port) = spawn_webhook(&world, &secret).await;
    let body = bounce("wrapped@example.test", "hard_bounce");

    let mut answers = Vec::new();
    for (id, timestamp) in [("msg_min", i64::MIN), ("msg_max", i64::MAX)] {
        answers.push(post(port, &signed(&secret, id, timestamp, &body), &body).await);
    }
    let fresh = post(port, &signed(&secret, "msg_now", now(), &body), &body).await;
    let suppressed: i64 = sqlx::query_scalar("SELECT count(*) FROM suppressions")
        .fetch_one(world.pool())
        .await
        .unwrap();
    replica.stop_gracefully().await;

    for (status, answer) in &answers {
        assert_eq!(*status, 401, "{answer}");
        assert!(answer.contains(r#""outcome":"stale""#), "{answer}");
    }
    assert_eq!(fresh.0, 200, "{}", fresh.1);
    assert_eq!(suppressed, 1, "only the request stamped now suppresses");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_bounce_forgets_webhook_ids_older_than_ten_minutes_as_a_hard_one_does() {
    let world = harness::world_for(Backend::Redis).await;
    let secret = new_secret();
    let (mut replica, port) = spawn_webhook(&world, &secret).await;
    sqlx::query(
        "INSERT INTO webhook_ids (id, received_at) VALUES
           ('msg_old', now() - interval '11 minutes'), ('msg_recent', now() - interval '1 minute')",
    )
    .execute(world.pool())
    .await
    .unwrap();
    let soft = bounce("full-mailbox@example.test", "soft_bounce");

    let (status, answer) = post(port, &signed(&secret, "msg_soft", now(), &soft), &soft).await;
    let (again, _) = post(port, &signed(&secret, "msg_soft", now(), &soft), &soft).await;
    let kept: Vec<String> = sqlx::query_scalar("SELECT id FROM webhook_ids ORDER BY id")
        .fetch_all(world.pool())
        .await
        .unwrap();
    replica.stop_gracefully().await;

    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""outcome":"ignored""#), "{answer}");
    assert_eq!(again, 409, "a soft bounce's id is still remembered");
    assert_eq!(kept, ["msg_recent", "msg_soft"]);
}
