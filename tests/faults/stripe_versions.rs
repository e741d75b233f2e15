//! Stripe Billing's SEPA debit, held from its first event to its dispute,
//! on Stripe as it is today (2025-05-28.basil: no PaymentIntent names its
//! invoice, the worker asks Stripe's API) and as it was (2024-06-20: the
//! events name each other, no lookup), against the real route, events
//! built from Stripe's object definitions and signed as Stripe signs. A
//! local server answers the lookups as Stripe's API does and misbehaves on
//! demand: the webhook answers before a held lookup, a 500, a 429 and an
//! answer held past the timeout delay the hold until Stripe answers, an
//! empty answer leaves the signal waiting, and a refused key is one error
//! line.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::stripe_api::{Answer, StripeApi};
use crate::common::{self, Backend, World};
use crate::harness::{self, Replica};
use crate::signals::{hold, spawn_signals_with, stripe, stripe_secret, tick, versioned};
use crate::webhook::{new_secret, now};

const BASIL: Option<&str> = Some("2025-05-28.basil");
const ACACIA: Option<&str> = Some("2024-06-20");

/// A replica with a Stripe secret and a restricted key pointed at `api`.
async fn replica(world: &mut World, api: &StripeApi) -> (Replica, u16, String) {
    let secret = stripe_secret();
    let env = vec![
        (
            "INVOICE_REMINDER__PAYMENTS__STRIPE_API_KEY".to_owned(),
            "rk_test_51QlookupOnlyInvoicesRead".to_owned(),
        ),
        (
            "INVOICE_REMINDER__PAYMENTS__STRIPE_API_BASE".to_owned(),
            api.base.clone(),
        ),
    ];
    let (replica, port) = spawn_signals_with(world, &[&secret], &new_secret(), env).await;
    (replica, port, secret)
}

/// A Stripe Invoice of `version` for our `invoice`, with `status`.
fn invoice(id: &str, ours: i64, status: &str, version: Option<&str>, pi: Option<&str>) -> Value {
    let mut o = json!({"id": id, "object": "invoice", "account_country": "DE",
        "amount_due": 12345, "amount_paid": if status == "paid" { 12345 } else { 0 },
        "amount_remaining": if status == "paid" { 0 } else { 12345 },
        "collection_method": "charge_automatically", "currency": "eur",
        "customer": "cus_R1a2b3c4d5", "livemode": false,
        "metadata": {"invoice_id": ours.to_string()}, "number": format!("A1B2C3-{ours:04}"),
        "status": status, "status_transitions": {"finalized_at": now() - 60, "paid_at": null},
        "lines": {"object": "list", "data": [], "has_more": false}});
    if version == ACACIA {
        o["paid"] = json!(status == "paid");
        o["payment_intent"] = json!(pi);
        o["charge"] = Value::Null;
    } else {
        o["parent"] = json!({"type": "subscription_details",
            "subscription_details": {"metadata": {}, "subscription": "sub_1QxYz"}});
    }
    o
}

/// A PaymentIntent Stripe Billing made: no metadata; before basil it names
/// its invoice.
fn intent(pi: &str, status: &str, version: Option<&str>, invoice: &str) -> Value {
    let mut o = json!({"id": pi, "object": "payment_intent", "amount": 12345, "currency": "eur",
        "customer": "cus_R1a2b3c4d5", "livemode": false, "metadata": {},
        "payment_method_types": ["sepa_debit"], "status": status,
        "latest_charge": format!("ch_{}", &pi[3..])});
    if version == ACACIA {
        o["invoice"] = json!(invoice);
    }
    o
}

fn dispute(pi: &str) -> Value {
    json!({"id": format!("dp_{}", &pi[3..]), "object": "dispute", "amount": 12345,
           "charge": format!("ch_{}", &pi[3..]), "currency": "eur", "livemode": false,
           "metadata": {}, "payment_intent": pi, "reason": "general",
           "status": "needs_response"})
}

/// Sends each event of a Billing SEPA debit in `version`'s shape, checking
/// the hold after each; `after_processing` runs once the debit's first
/// event is answered.
async fn billing_flow(world: &World, port: u16, secret: &str, version: Option<&str>, ours: i64) {
    let t = now();
    let (pi, inv) = (format!("pi_{ours}x"), format!("in_{ours}x"));
    let send = |id: &str, kind: &str, at: i64, object: Value| {
        let body = versioned(id, kind, at, version, object);
        let secret = secret.to_owned();
        async move { stripe(port, &secret, &body).await }
    };
    let e = |n: &str| format!("evt_{ours}_{n}");
    send(
        &e("fin"),
        "invoice.finalized",
        t,
        invoice(&inv, ours, "open", version, None),
    )
    .await;
    let processing = send(
        &e("proc"),
        "payment_intent.processing",
        t + 1,
        intent(&pi, "processing", version, &inv),
    )
    .await;
    assert_eq!(processing.0, 200);
    common::wait_until("held pending", Duration::from_secs(30), || async {
        hold(world, ours).await.as_deref() == Some("pending")
    })
    .await;
    assert!(
        !tick(world).await.contains(&ours),
        "held while the debit settles"
    );
    if version == BASIL {
        let payment = json!({"id": format!("inpay_{ours}"), "object": "invoice_payment",
            "amount_paid": 12345, "amount_requested": 12345, "currency": "eur", "invoice": inv,
            "is_default": true, "livemode": false,
            "payment": {"type": "payment_intent", "payment_intent": pi}, "status": "paid",
            "status_transitions": {"canceled_at": null, "paid_at": t + 2}});
        send(&e("pay"), "invoice_payment.paid", t + 2, payment).await;
    }
    send(
        &e("succ"),
        "payment_intent.succeeded",
        t + 2,
        intent(&pi, "succeeded", version, &inv),
    )
    .await;
    send(
        &e("paid"),
        "invoice.paid",
        t + 3,
        invoice(&inv, ours, "paid", version, Some(&pi)),
    )
    .await;
    assert_eq!(hold(world, ours).await.as_deref(), Some("paid"));
    let opened = send(&e("dsp"), "charge.dispute.created", t + 4, dispute(&pi)).await;
    assert_eq!(
        opened,
        (200, "stored".into()),
        "the dispute finds the invoice through the PaymentIntent"
    );
    assert_eq!(hold(world, ours).await.as_deref(), Some("disputed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_billing_sepa_debit_is_held_from_processing_to_dispute_on_basil_through_a_lookup_and_on_2024_without()
 {
    for (version, lookups) in [(BASIL, 1), (ACACIA, 0)] {
        let mut world = harness::world_for(Backend::Redis).await;
        let ids = common::insert_overdue(world.pool(), 2).await;
        let api = StripeApi::start().await;
        let (pi, inv) = (format!("pi_{}x", ids[0]), format!("in_{}x", ids[0]));
        api.pays(&pi, invoice(&inv, ids[0], "open", BASIL, None));
        let (mut replica, port, secret) = replica(&mut world, &api).await;

        billing_flow(&world, port, &secret, version, ids[0]).await;
        replica.stop_gracefully().await;

        let asked = api.requests();
        assert_eq!(asked.len(), lookups, "{version:?}: {asked:?}");
        assert!(
            asked.iter().all(|(_, keyed)| *keyed),
            "with the restricted key as a bearer token"
        );
        tick(&world).await;
        let mailed: Vec<i64> = world
            .sink
            .received()
            .iter()
            .filter_map(|m| m.invoice_id())
            .collect();
        assert_eq!(
            mailed,
            vec![ids[1]],
            "{version:?}: only the invoice without a payment, once"
        );
        assert!(
            !replica.log().contains("rk_test_51QlookupOnlyInvoicesRead"),
            "the key is never logged"
        );
    }
}

/// A replica whose lookups meet `answers` first; a basil debit's event for
/// our `invoice`: (the webhook's answer, the replica).
async fn debit_meeting(
    answers: &[Answer],
    world: &mut World,
    api: &StripeApi,
    ours: i64,
) -> ((u16, String), Replica) {
    api.pays(
        &format!("pi_{ours}x"),
        invoice(&format!("in_{ours}x"), ours, "open", BASIL, None),
    );
    api.script(answers);
    let (replica, port, secret) = replica(world, api).await;
    let body = versioned(
        "evt_proc",
        "payment_intent.processing",
        now(),
        BASIL,
        intent(&format!("pi_{ours}x"), "processing", BASIL, ""),
    );
    (stripe(port, &secret, &body).await, replica)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_answers_before_a_held_lookup_and_the_hold_applies_once_stripe_answers() {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = common::insert_overdue(world.pool(), 1).await;
    let api = StripeApi::start().await;
    let (answer, mut replica) = debit_meeting(&[Answer::Held], &mut world, &api, ids[0]).await;

    // The 200 came while Stripe's answer is still held.
    assert_eq!(answer, (200, "unlinked".into()));
    common::wait_until(
        "the lookup reaches Stripe",
        Duration::from_secs(10),
        || async { !api.requests().is_empty() },
    )
    .await;
    assert_eq!(api.answered(), 0, "Stripe has not answered yet");
    assert_eq!(hold(&world, ids[0]).await, None);
    api.release();
    common::wait_until(
        "held once Stripe answers",
        Duration::from_secs(30),
        || async { hold(&world, ids[0]).await.as_deref() == Some("pending") },
    )
    .await;
    replica.stop_gracefully().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_that_meets_a_500_a_429_and_an_answer_past_its_timeout_holds_the_invoice_once_stripe_answers()
 {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = common::insert_overdue(world.pool(), 1).await;
    let api = StripeApi::start().await;
    let (answer, mut replica) = debit_meeting(
        &[Answer::Broken, Answer::TooMany(1), Answer::Held],
        &mut world,
        &api,
        ids[0],
    )
    .await;

    assert_eq!(answer, (200, "unlinked".into()));
    common::wait_until(
        "held once Stripe answers",
        Duration::from_secs(30),
        || async { hold(&world, ids[0]).await.as_deref() == Some("pending") },
    )
    .await;
    replica.stop_gracefully().await;
    assert_eq!(
        api.requests().len(),
        4,
        "a 500, a 429, one held past the timeout, then the answer: {:?}",
        api.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_is_one_error_naming_it_and_an_empty_answer_leaves_the_signal_waiting() {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = common::insert_overdue(world.pool(), 2).await;
    let api = StripeApi::start().await;
    api.script(&[Answer::Unauthorized, Answer::Unauthorized]);
    let (mut replica, port, secret) = replica(&mut world, &api).await;
    for n in 0..2 {
        let body = versioned(
            &format!("evt_{n}"),
            "payment_intent.processing",
            now(),
            BASIL,
            intent(&format!("pi_refused{n}"), "processing", BASIL, ""),
        );
        assert_eq!(stripe(port, &secret, &body).await, (200, "unlinked".into()));
    }
    common::wait_until("both lookups refused", Duration::from_secs(30), || async {
        api.answered() >= 2
    })
    .await;
    // Stripe knows no invoice for this one: an empty list.
    let body = versioned(
        "evt_empty",
        "payment_intent.processing",
        now(),
        BASIL,
        intent("pi_unknown", "processing", BASIL, ""),
    );
    assert_eq!(stripe(port, &secret, &body).await, (200, "unlinked".into()));
    common::wait_until("the empty answer", Duration::from_secs(30), || async {
        api.answered() >= 3
    })
    .await;
    // The route keeps working.
    let own = json!({"id": "pi_own", "object": "payment_intent", "metadata": {"invoice_id": ids[0].to_string()}});
    let stored = stripe(
        port,
        &secret,
        &versioned("evt_own", "payment_intent.succeeded", now(), BASIL, own),
    )
    .await;
    replica.stop_gracefully().await;

    assert_eq!(stored, (200, "stored".into()));
    let log = replica.log();
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("payments.stripe_api_key"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line naming the key: {log}");
    assert_eq!(
        harness::audit(&world).await.1["payment_holds"]["unlinked"],
        3
    );
    assert_eq!(tick(&world).await, vec![ids[1]]);
}
