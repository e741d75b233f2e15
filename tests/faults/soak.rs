//! The soak. Off by default (it takes minutes):
//!
//! ```text
//! cargo nextest run --test faults --run-ignored only soak
//! SOAK_SECS=60 cargo nextest run --test faults --run-ignored only soak   # shorter
//! ```
//!
//! Five replicas for five minutes while new invoices keep arriving and a
//! chaos loop SIGKILLs (and replaces) a replica, SIGSTOPs one past the TTL,
//! or takes the lock away (Redis restarted empty; for PostgreSQL, the
//! holder's session terminated), every few seconds. Prints the totals.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::{self, Backend, SmtpMode};
use crate::harness::{self, RedisServer, Replica, ReplicaOptions};

/// xorshift64*: reproducible chaos from a printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % below
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: minutes long; run with --run-ignored only"]
async fn soak_five_replicas_under_random_kills_pauses_and_lock_losses_redis() {
    soak(Backend::Redis).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: minutes long; run with --run-ignored only"]
async fn soak_five_replicas_under_random_kills_pauses_and_lock_losses_postgres() {
    soak(Backend::Postgres).await
}

/// Redis backend: the lock loss is a Redis restart (empty). PostgreSQL:
/// the holder's session is terminated.
async fn soak(backend: Backend) {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let seed: u64 = std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let mut rng = Rng(seed);
    let redis = &mut RedisServer::start().await;
    let mut world = harness::world_for(backend).await;
    world
        .set("redis.url", redis.url())
        .set("reminders.batch_size", 50)
        .set("reminders.send_concurrency", 4);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(3)));
    common::insert_overdue(world.pool(), 2000).await;
    let rounds = (secs * 2).max(1) as usize;
    let adder = harness::keep_adding_overdue(&world, 25, Duration::from_millis(500), rounds);

    let mut replicas: Vec<Replica> = harness::spawn_replicas(&world, 5);
    let mut dead: Vec<String> = Vec::new();
    let (mut kills, mut pauses, mut restarts, mut spawned) = (0, 0, 0, 5);
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(2000 + rng.next(3000))).await;
        match rng.next(3) {
            0 => {
                let i = rng.next(replicas.len() as u64) as usize;
                replicas[i].kill();
                dead.push(replicas[i].name.clone());
                spawned += 1;
                replicas[i] =
                    Replica::spawn(&world, &format!("r{spawned}"), ReplicaOptions::default());
                kills += 1;
            }
            1 => {
                let i = rng.next(replicas.len() as u64) as usize;
                replicas[i].pause();
                tokio::time::sleep(Duration::from_millis(2500 + rng.next(1500))).await;
                replicas[i].resume();
                pauses += 1;
            }
            _ => {
                match backend {
                    Backend::Redis => redis.restart().await,
                    Backend::Postgres => backend.break_lock(&world).await,
                }
                restarts += 1;
            }
        }
    }
    let added = adder.await.unwrap();
    let dead_refs: Vec<&str> = dead.iter().map(String::as_str).collect();
    harness::wait_until_settled(&world, &dead_refs, Duration::from_secs(120)).await;
    harness::stop_all(&mut replicas).await;
    let ticks: i64 = sqlx::query_scalar("SELECT count(*) FROM job_runs")
        .fetch_one(world.pool())
        .await
        .unwrap();
    let report = harness::assert_exactly_once(&world, kills * 2 * 50).await;
    let unknown = report["unknown"].as_array().map(Vec::len).unwrap_or(0);
    println!(
        "soak ({}): seed={seed} seconds={secs} invoices={} ticks={ticks} mails={} kills={kills} pauses={pauses} \
         lock_losses={restarts} duplicates=0 unknown={unknown}",
        backend.name(),
        2000 + added,
        world.sink.count(),
    );
}
