//! Customer mode: a statement leaves out an invoice a payment signal holds
//! (the one owing condition reads the holds in both modes), while the
//! customer's other owed invoices are still mailed.

use chrono::Utc;
use invoice_reminder::domain::{InvoiceId, PaymentSignal, Signal, SignalOutcome};

use super::{customer_with, listed, tick, world_in_customer_mode};

#[tokio::test]
async fn a_statement_leaves_out_an_invoice_a_payment_signal_holds_and_lists_the_rest() {
    let world = world_in_customer_mode().await;
    let (_, invoices) = customer_with(world.pool(), "Held", &[10, 12, 14]).await;
    let held = invoices[1];
    let signal = PaymentSignal {
        provider: "stripe",
        event_id: "evt_statement".into(),
        signal: Some(Signal::Pending),
        invoice_id: Some(InvoiceId::from(held.to_string().as_str())),
        object_id: "pi_1".into(),
        refs: vec!["pi_1".into()],
        links: Vec::new(),
        at: Utc::now(),
    };
    let outcome = invoice_reminder::db::payments::record(
        &world.database(),
        &signal,
        std::time::Duration::from_secs(7 * 24 * 3600),
    )
    .await
    .unwrap();

    tick(&world).await;

    assert_eq!(outcome.outcome, SignalOutcome::Stored);
    let mails = world.sink.received();
    assert_eq!(mails.len(), 1, "one statement");
    let mut expected = vec![invoices[0], invoices[2]];
    expected.sort();
    let mut got = listed(&mails[0]);
    got.sort();
    assert_eq!(got, expected, "the held invoice is left out");
    let claimed: i64 = sqlx::query_scalar("SELECT count(*) FROM reminders WHERE invoice_id = $1")
        .bind(held.to_string())
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(claimed, 0, "no reminder is claimed for it");
}
