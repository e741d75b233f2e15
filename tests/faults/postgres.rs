//! PostgreSQL unreachable mid-tick.

use std::time::Duration;

use crate::common::proxy::Proxy;
use crate::common::{self, Backend};
use crate::for_each_backend;
use crate::harness;

for_each_backend!(
    postgres_unreachable_mid_tick_aborts_it_cleanly_and_the_next_tick_loses_and_doubles_nothing
);

async fn postgres_unreachable_mid_tick_aborts_it_cleanly_and_the_next_tick_loses_and_doubles_nothing(
    backend: Backend,
) {
    let mut world = harness::world_for(backend).await;
    let (proxy, via_proxy) = Proxy::for_postgres(&world.db.url).await;
    world.set("database.url", via_proxy);
    harness::slow_down(&mut world);
    let mut replicas = harness::start_mid_backlog(&world, 1200, 2, 100).await;
    proxy.go_down();
    let failures_before: usize = replicas.iter().map(|r| tick_failures(&r.log())).sum();
    common::wait_until(
        "three ticks failed on the database",
        Duration::from_secs(30),
        || async {
            replicas
                .iter()
                .map(|r| tick_failures(&r.log()))
                .sum::<usize>()
                >= failures_before + 3
        },
    )
    .await;
    for r in replicas.iter_mut() {
        assert!(r.is_running(), "{} died: {}", r.name, r.log());
    }
    proxy.come_up().await;
    harness::wait_until_settled(&world, &[], Duration::from_secs(90)).await;
    harness::stop_all(&mut replicas).await;
    // Results written while the database was away were kept and written
    // later; claims whose reply was lost were handed back by the run sweep.
    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(world.sink.count(), 1200);
}

fn tick_failures(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("ERROR") && l.contains("tick failed") && l.contains("PostgreSQL"))
        .count()
}
