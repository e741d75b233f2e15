//! Nothing never sent is left unknown: a claim does not mark its rows
//! started, so a claim whose reply is lost leaves rows the next tick
//! returns and sends, never rows `audit` must list as unknown.

use super::{customer_with, world_in_customer_mode};
use crate::common;
use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_claim_whose_reply_is_lost_leaves_nothing_unknown() {
    let mut world = world_in_customer_mode().await;
    let (_, invoices) = customer_with(world.pool(), "Late", &[12, 10]).await;
    // Every transaction that inserts reminders commits two seconds late: the
    // claim's reply misses its deadline, though the claim commits.
    sqlx::raw_sql(
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON reminders
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("database.statement_timeout", "1s");
    let ctx = world.context().await;
    let _ = run_tick(&ctx, &CancellationToken::new()).await;
    common::wait_until(
        "the late claim commits",
        std::time::Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM reminders")
                .fetch_one(world.pool())
                .await
                .unwrap_or(0)
                >= 1
        },
    )
    .await;
    sqlx::raw_sql("DROP TRIGGER slow_commit ON reminders")
        .execute(world.pool())
        .await
        .unwrap();
    assert_eq!(world.sink.count(), 0);

    let out = common::cli(&world, &["audit", "--json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["unknown"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );

    world.set("database.statement_timeout", "30s");
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    let mails = world.sink.received();
    assert_eq!(mails.len(), 1);
    assert_eq!(super::listed(&mails[0]), invoices);
}
