//! Proof of acceptance and the message archive against the real services:
//! each sent row keeps the SMTP server's final reply and the SHA-256 of the
//! bytes the server received; with `archive.store = "database"` the message
//! itself is kept (compressed) and read back exactly; the tick deletes what
//! is older than `archive.keep_days`.

use invoice_reminder::db::archive;
use invoice_reminder::domain::InvoiceId;
use invoice_reminder::tick::run_tick;
use sha2::Digest as _;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

async fn tick(world: &World) {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
}

/// SHA-256 of what the server received for one message (its DATA, without
/// SMTP's end-of-data line).
fn received_sha256(raw: &str) -> Vec<u8> {
    sha2::Sha256::digest(raw.as_bytes()).to_vec()
}

#[tokio::test]
async fn each_sent_row_keeps_the_servers_reply_and_the_sha256_of_the_bytes_the_server_received() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 3).await;
    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 3);
    for mail in &mails {
        let invoice = InvoiceId::from(mail.invoice_id().unwrap());
        assert!(ids.contains(&mail.invoice_id().unwrap()));
        let proof = archive::proof_of(&world.database(), &invoice, &"overdue".into())
            .await
            .unwrap()
            .expect("the reminder row");
        assert_eq!(proof.status, "sent");
        // mailin-embedded answers the end of data with "250 OK".
        assert_eq!(proof.smtp_reply.as_deref(), Some("250 OK"));
        assert_eq!(
            proof.message_sha256.as_deref(),
            Some(received_sha256(&mail.raw).as_slice()),
            "the hash stored is the hash of what the server received"
        );
        assert_eq!(proof.sha256_hex().map(|h| h.len()), Some(64));
    }
    let archived: i64 = sqlx::query_scalar("SELECT count(*) FROM message_archive")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(archived, 0, "archive.store = \"none\" keeps no copy");
}

#[tokio::test]
async fn with_the_archive_on_each_sent_message_is_kept_compressed_and_read_back_byte_for_byte() {
    let mut world = World::new().await;
    world.set("archive.store", "database");
    common::insert_overdue(world.pool(), 5).await;
    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 5);
    for mail in &mails {
        let message_id = mail
            .header("Message-ID")
            .unwrap()
            .trim_matches(|c| c == '<' || c == '>')
            .to_owned();
        let kept = archive::archived_message(&world.database(), &message_id)
            .await
            .unwrap()
            .expect("the message is archived");
        assert_eq!(
            String::from_utf8_lossy(&kept.bytes),
            mail.raw,
            "archived bytes = received bytes"
        );
        assert_eq!(kept.sha256, received_sha256(&mail.raw));
    }
    let (size, compressed): (i64, i64) = sqlx::query_as(
        "SELECT sum(size)::bigint, sum(octet_length(compressed))::bigint FROM message_archive",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    assert!(
        compressed < size,
        "stored compressed: {compressed} of {size} bytes"
    );
}

#[tokio::test]
async fn the_tick_deletes_archived_messages_older_than_keep_days_and_keeps_the_rest() {
    let mut world = World::new().await;
    world
        .set("archive.store", "database")
        .set("archive.keep_days", 30);
    common::insert_overdue(world.pool(), 2).await;
    tick(&world).await;
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT message_id FROM message_archive ORDER BY message_id")
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert_eq!(ids.len(), 2);
    sqlx::query(
        "UPDATE message_archive SET archived_at = now() - interval '31 days' WHERE message_id = $1",
    )
    .bind(&ids[0])
    .execute(world.pool())
    .await
    .unwrap();

    tick(&world).await;

    let left: Vec<String> =
        sqlx::query_scalar("SELECT message_id FROM message_archive ORDER BY message_id")
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert_eq!(left, vec![ids[1].clone()]);
}

#[tokio::test]
async fn a_damaged_archived_message_is_reported_not_returned() {
    let mut world = World::new().await;
    world.set("archive.store", "database");
    common::insert_overdue(world.pool(), 1).await;
    tick(&world).await;
    let id: String = sqlx::query_scalar("SELECT message_id FROM message_archive")
        .fetch_one(world.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE message_archive SET sha256 = sha256(sha256)")
        .execute(world.pool())
        .await
        .unwrap();

    let err = archive::archived_message(&world.database(), &id)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains(&id) && err.contains("SHA-256"), "{err}");
}

/// The archive's size per message, for README ("Operating it") and
/// BENCHMARKS.md: 1,000 reminders sent with the archive on, measured with
/// `pg_total_relation_size` (table, TOAST and indexes).
#[tokio::test]
async fn a_thousand_archived_reminders_take_less_than_two_kilobytes_each() {
    let mut world = World::new().await;
    world.set("archive.store", "database");
    common::insert_overdue(world.pool(), 1_000).await;
    tick(&world).await;
    sqlx::query("VACUUM ANALYZE message_archive")
        .execute(world.pool())
        .await
        .unwrap();

    let (count, total, raw, compressed): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), pg_total_relation_size('message_archive'),
                sum(size)::bigint, sum(octet_length(compressed))::bigint
           FROM message_archive",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    assert_eq!(count, 1_000);
    let per_message = total / count;
    println!(
        "archive: {count} messages, {total} bytes in all (pg_total_relation_size), {per_message} bytes per message; messages {} bytes raw, {} compressed on average",
        raw / count,
        compressed / count
    );
    assert!(
        per_message < 2048,
        "{per_message} bytes per archived message"
    );
}
