//! `explain --customer` and the console's customer page read a customer
//! once: a fixed number of SQL statements whatever the number of its
//! invoices, counted as sqlx reports each statement it runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use invoice_reminder::operator::explain::explain_customer;
use tracing_subscriber::layer::SubscriberExt as _;

use super::{customer_with, tick, world_in_customer_mode};

/// Counts the statements sqlx runs (its `sqlx::query` events).
struct Statements(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() == "sqlx::query" {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test]
async fn explaining_a_customer_with_200_invoices_takes_at_most_10_statements() {
    let world = world_in_customer_mode().await;
    let (customer, invoices) = customer_with(world.pool(), "Big", &[12; 200]).await;
    // One statement went: the customer has reminders, sent and owed.
    tick(&world).await;
    let ctx = world.context().await;
    let desk = invoice_reminder::operator::desk::Desk::new(ctx.db.clone(), ctx.settings.clone());
    // Today is read once per desk, before the explanation's own statements.
    desk.today().await.unwrap();
    let counted = Arc::new(AtomicUsize::new(0));
    let subscriber = tracing_subscriber::registry().with(Statements(Arc::clone(&counted)));
    let _counting = tracing::subscriber::set_default(subscriber);

    let explained = explain_customer(&desk, &customer.to_string(), 1_000)
        .await
        .unwrap()
        .invoices;

    let statements = counted.load(Ordering::SeqCst);
    eprintln!("explain --customer over 200 invoices: {statements} statements");
    assert!(statements > 0, "the statements are counted");
    assert_eq!(explained.len(), invoices.len());
    assert!(
        explained.iter().any(|e| !e.reminders.is_empty()),
        "some of its invoices have reminders"
    );
    assert!(
        statements <= 10,
        "{statements} statements for {} invoices",
        invoices.len()
    );
}
