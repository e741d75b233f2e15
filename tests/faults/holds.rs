//! Holds in every real payment flow, on a real `run` serving the payment
//! routes: an invoice is held while any of its payment objects holds it
//! (a second PaymentIntent's failure ends only its own hold; a dispute
//! holds until it closes, and a lost one until an operator lifts it);
//! Stripe Billing's PaymentIntents, which name only their Stripe
//! invoice, find ours through what `invoice.*` events taught, in either
//! order; equal event times are decided by meaning, never by arrival; and
//! a paid hold ends once the books say paid, so a reopened invoice is
//! reminded again.

use chrono::{Duration, Utc};
use serde_json::json;

use crate::common::{self, Backend};
use crate::harness;
use crate::signals::{
    explain, generic, hold, intent, spawn_signals, stripe, stripe_secret, tick, versioned,
};
use crate::webhook::{new_secret, now};

/// A PaymentIntent that Stripe Billing made, before basil: no metadata,
/// only its Stripe invoice.
fn billing_intent(pi: &str, invoice: &str) -> serde_json::Value {
    json!({"id": pi, "object": "payment_intent", "invoice": invoice, "metadata": {},
           "payment_method_types": ["sepa_debit"], "status": "processing"})
}

/// A Stripe invoice carrying our id in its metadata.
fn stripe_invoice(id: &str, ours: i64, status: &str, pi: Option<&str>) -> serde_json::Value {
    json!({"id": id, "object": "invoice", "status": status, "paid": status == "paid",
           "payment_intent": pi, "metadata": {"invoice_id": ours.to_string()},
           "lines": {"object": "list", "data": [], "has_more": false}})
}

const OLD: Option<&str> = Some("2024-06-20");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_payment_intents_failure_or_a_dispute_of_another_never_ends_a_paid_hold() {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = common::insert_overdue(world.pool(), 3).await;
    let (two_intents, disputed, lost) = (ids[0], ids[1], ids[2]);
    let secret = stripe_secret();
    let (mut replica, port) = spawn_signals(&mut world, &[&secret], &new_secret()).await;
    let t = now();
    let send = |id: &str, kind: &str, at: i64, object: serde_json::Value| {
        let body = versioned(id, kind, at, OLD, object);
        let secret = secret.clone();
        async move { stripe(port, &secret, &body).await }
    };

    // pi_A pending, pi_B paid by card, then pi_A fails.
    send(
        "evt_a1",
        "payment_intent.processing",
        t,
        intent("pi_A", two_intents),
    )
    .await;
    send(
        "evt_b1",
        "payment_intent.succeeded",
        t + 1,
        intent("pi_B", two_intents),
    )
    .await;
    let a_failed = send(
        "evt_a2",
        "payment_intent.payment_failed",
        t + 2,
        intent("pi_A", two_intents),
    )
    .await;
    // A dispute of pi_C; then pi_D is pending and fails.
    send(
        "evt_c1",
        "payment_intent.succeeded",
        t,
        intent("pi_C", disputed),
    )
    .await;
    let dispute = json!({"id": "dp_C", "object": "dispute", "charge": "ch_C",
                         "payment_intent": "pi_C", "status": "needs_response"});
    send("evt_c2", "charge.dispute.created", t + 1, dispute).await;
    send(
        "evt_d1",
        "payment_intent.processing",
        t + 2,
        intent("pi_D", disputed),
    )
    .await;
    send(
        "evt_d2",
        "payment_intent.payment_failed",
        t + 3,
        intent("pi_D", disputed),
    )
    .await;
    // A dispute lost, with no other payment.
    let lost_dispute = json!({"id": "dp_L", "object": "dispute", "charge": "ch_L",
                              "payment_intent": "pi_L", "status": "lost"});
    send(
        "evt_l0",
        "payment_intent.processing",
        t,
        intent("pi_L", lost),
    )
    .await;
    send("evt_l1", "charge.dispute.closed", t + 1, lost_dispute).await;
    send(
        "evt_l2",
        "payment_intent.payment_failed",
        t + 2,
        intent("pi_L", lost),
    )
    .await;

    assert_eq!(a_failed, (200, "stored".into()));
    assert_eq!(tick(&world).await, Vec::<i64>::new(), "all three stay held");
    assert_eq!(hold(&world, two_intents).await.as_deref(), Some("paid"));
    assert_eq!(hold(&world, disputed).await.as_deref(), Some("disputed"));
    let explained = explain(&world, lost).await;
    assert_eq!(explained["reason"], "held_by_payment_signal");
    assert_eq!(
        explained["payment_hold"]["state"], "disputed",
        "{explained}"
    );
    assert_eq!(explained["payment_hold"]["dispute"], "lost", "{explained}");
    let objects: Vec<(String, String)> = explained["payment_holds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["object_id"].as_str().unwrap().to_owned(),
                h["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        objects.contains(&("dp_L".into(), "lost".into())),
        "{objects:?}"
    );
    assert!(
        objects.contains(&("pi_L".into(), "released".into())),
        "{objects:?}"
    );

    // An operator lifts the lost dispute: its invoice is reminded.
    sqlx::query(
        "UPDATE payment_holds SET state = 'lifted', lifted_by = 'test' WHERE invoice_id = $1",
    )
    .bind(lost.to_string())
    .execute(world.pool())
    .await
    .unwrap();
    assert_eq!(tick(&world).await, vec![lost]);
    replica.stop_gracefully().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_billings_intents_find_our_invoice_through_its_invoice_events_in_either_order() {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = common::insert_overdue(world.pool(), 3).await;
    let (first, late_link, owed) = (ids[0], ids[1], ids[2]);
    let secret = stripe_secret();
    let (mut replica, port) = spawn_signals(&mut world, &[&secret], &new_secret()).await;
    let t = now();
    let send = |id: &str, kind: &str, at: i64, object: serde_json::Value| {
        let body = versioned(id, kind, at, OLD, object);
        let secret = secret.clone();
        async move { stripe(port, &secret, &body).await }
    };

    // The invoice is finalized (our id in its metadata), then its SEPA
    // debit starts: held pending through the link.
    let finalized = send(
        "evt_f1",
        "invoice.finalized",
        t,
        stripe_invoice("in_1", first, "open", None),
    )
    .await;
    let processing = send(
        "evt_p1",
        "payment_intent.processing",
        t + 1,
        billing_intent("pi_1", "in_1"),
    )
    .await;
    // The other way round: the debit's event first, kept unlinked, then
    // the invoice's event links it.
    let early = send(
        "evt_p2",
        "payment_intent.processing",
        t,
        billing_intent("pi_2", "in_2"),
    )
    .await;
    let unlinked = harness::audit(&world).await.1["payment_holds"]["unlinked"].clone();
    let linked = send(
        "evt_f2",
        "invoice.finalized",
        t + 1,
        stripe_invoice("in_2", late_link, "open", None),
    )
    .await;

    assert_eq!(finalized, (200, "learnt".into()));
    assert_eq!(processing, (200, "stored".into()));
    assert_eq!(early, (200, "unlinked".into()));
    assert_eq!(unlinked, 1);
    assert_eq!(linked, (200, "learnt".into()));
    assert_eq!(tick(&world).await, vec![owed], "both held pending");
    assert_eq!(hold(&world, first).await.as_deref(), Some("pending"));
    assert_eq!(hold(&world, late_link).await.as_deref(), Some("pending"));

    // invoice.paid carries the PaymentIntent; a dispute names only it.
    let paid = send(
        "evt_i1",
        "invoice.paid",
        t + 10,
        stripe_invoice("in_1", first, "paid", Some("pi_1")),
    )
    .await;
    assert_eq!(paid, (200, "stored".into()));
    assert_eq!(hold(&world, first).await.as_deref(), Some("paid"));
    let dispute = json!({"id": "dp_1", "object": "dispute", "charge": "ch_1",
                         "payment_intent": "pi_1", "status": "warning_needs_response"});
    let opened = send("evt_d1", "charge.dispute.created", t + 20, dispute).await;
    assert_eq!(opened, (200, "stored".into()));
    let explained = explain(&world, first).await;
    assert_eq!(
        explained["payment_hold"]["state"], "disputed",
        "a dispute outranks the payment it contests"
    );
    assert!(
        explained["payment_holds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["object_id"] == "dp_1" && h["state"] == "disputed"),
        "{explained}"
    );
    assert_eq!(
        harness::audit(&world).await.1["payment_holds"]["unlinked"],
        0
    );
    replica.stop_gracefully().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_with_the_same_time_are_decided_by_meaning_in_either_order() {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = common::insert_overdue(world.pool(), 2).await;
    let secret = new_secret();
    let (mut replica, port) = spawn_signals(&mut world, &[], &secret).await;
    // A bank feed's date-only time: the same instant for both.
    let at = Utc::now() - Duration::days(8);
    generic(port, &secret, "m1", ids[0], "paid", at).await;
    let later = generic(port, &secret, "m2", ids[0], "pending", at).await;
    let first = generic(port, &secret, "m3", ids[1], "pending", at).await;
    let wins = generic(port, &secret, "m4", ids[1], "paid", at).await;

    assert_eq!(
        (later, first, wins),
        (
            (200, "older".into()),
            (200, "stored".into()),
            (200, "stored".into())
        )
    );
    // A pending hold from eight days ago would have ended: both stay paid.
    assert_eq!(tick(&world).await, Vec::<i64>::new());
    assert_eq!(hold(&world, ids[0]).await.as_deref(), Some("paid"));
    assert_eq!(hold(&world, ids[1]).await.as_deref(), Some("paid"));
    replica.stop_gracefully().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_hold_ends_once_the_books_say_paid_so_a_reopened_invoice_is_reminded_again() {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = common::insert_overdue(world.pool(), 1).await;
    let secret = new_secret();
    let (mut replica, port) = spawn_signals(&mut world, &[], &secret).await;
    let future = generic(
        port,
        &secret,
        "m0",
        ids[0],
        "paid",
        Utc::now() + Duration::days(27_000),
    )
    .await;
    assert_eq!(future.0, 400, "a time far ahead is refused");
    generic(port, &secret, "m1", ids[0], "paid", Utc::now()).await;
    assert_eq!(tick(&world).await, Vec::<i64>::new());

    let set_paid = |paid: bool| {
        sqlx::query("UPDATE invoices SET paid_at = CASE WHEN $2 THEN now() END WHERE id = $1")
            .bind(ids[0])
            .bind(paid)
    };
    set_paid(true).execute(world.pool()).await.unwrap();
    assert_eq!(tick(&world).await, Vec::<i64>::new(), "paid in the books");
    // A recalled transfer: the books reopen it.
    set_paid(false).execute(world.pool()).await.unwrap();
    let explained = explain(&world, ids[0]).await;
    assert_eq!(
        explained["payment_hold"],
        serde_json::Value::Null,
        "{explained}"
    );
    assert_eq!(
        explained["payment_holds"][0]["state"], "booked",
        "{explained}"
    );
    assert_eq!(tick(&world).await, vec![ids[0]], "reminded again");
    replica.stop_gracefully().await;
}

/// One invoice line item as Stripe writes it (2025-03-31.basil and later).
fn line_item(n: usize, invoice: &str) -> serde_json::Value {
    json!({"id": format!("il_{n:024}"), "object": "line_item", "amount": 1500,
           "currency": "eur", "description": format!("Seat {n} x Pro plan (at €15.00 / month)"),
           "discount_amounts": [], "discountable": true, "discounts": [], "invoice": invoice,
           "livemode": false, "metadata": {"seat": n.to_string(), "team": "finance"},
           "parent": {"type": "subscription_item_details", "invoice_item_details": null,
                      "subscription_item_details": {"invoice_item": null, "proration": false,
                          "proration_details": {"credited_items": null},
                          "subscription": "sub_1QAbCdEfGhIjKlMn", "subscription_item": format!("si_{n:014}")}},
           "period": {"end": 1_767_225_600, "start": 1_764_547_200},
           "pretax_credit_amounts": [],
           "pricing": {"price_details": {"price": "price_1QAbCdEfGhIjKlMnOpQr", "product": "prod_RAbCdEfGhIjKlM"},
                       "type": "price_details", "unit_amount_decimal": "1500"},
           "quantity": 1, "taxes": [{"amount": 285, "tax_behavior": "exclusive",
               "tax_rate_details": {"tax_rate": "txr_1QAbCdEfGhIjKlMn"}, "taxability_reason": "standard_rated",
               "taxable_amount": 1500, "type": "tax_rate_details"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_invoice_paid_with_a_hundred_line_items_is_taken() {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = common::insert_overdue(world.pool(), 1).await;
    let secret = stripe_secret();
    let (mut replica, port) = spawn_signals(&mut world, &[&secret], &new_secret()).await;
    let mut invoice = stripe_invoice("in_big", ids[0], "paid", None);
    invoice["lines"] = json!({"object": "list", "has_more": false, "total_count": 100,
                              "url": "/v1/invoices/in_big/lines",
                              "data": (0..100).map(|n| line_item(n, "in_big")).collect::<Vec<_>>()});
    let body = versioned(
        "evt_big",
        "invoice.paid",
        now(),
        Some("2025-05-28.basil"),
        invoice,
    );
    assert!(
        body.len() > 64 * 1024,
        "larger than the bounce webhook's limit: {}",
        body.len()
    );

    let answer = stripe(port, &secret, &body).await;
    replica.stop_gracefully().await;

    assert_eq!(answer, (200, "stored".into()));
    assert_eq!(hold(&world, ids[0]).await.as_deref(), Some("paid"));
}
