//! `POST /webhooks/stripe` and `POST /webhooks/payments` on a real `run`
//! process: signed payment signals hold reminders the view still calls
//! owed, a second delivery of an event changes nothing, an older event
//! never undoes a newer one, a failed payment ends its own object's hold
//! and no other, a won dispute leaves the payment standing, a pending hold
//! ends on its own, and bad input is refused with nothing stored. Ticks
//! are run with `run-once` between the requests (the replica's own
//! schedule never fires during a test).

use serde_json::json;

use crate::common::Backend;
use crate::harness;
use crate::http::{get, sample};
use crate::signals::{
    event, hold, intent, post, spawn_signals, stripe, stripe_secret, stripe_signed, tick,
};
use crate::webhook::{new_secret, now, signed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_events_hold_paid_pending_and_disputed_invoices_until_their_own_object_releases_them()
 {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = crate::common::insert_overdue(world.pool(), 4).await;
    let (paid, pending, disputed, untouched) = (ids[0], ids[1], ids[2], ids[3]);
    let (old_secret, new_secret_) = (stripe_secret(), stripe_secret());
    let (mut replica, port) =
        spawn_signals(&mut world, &[&old_secret, &new_secret_], &new_secret()).await;
    let t = now();

    let succeeded = event(
        "evt_paid",
        "payment_intent.succeeded",
        t,
        intent("pi_paid", paid),
    );
    let stored = stripe(port, &new_secret_, &succeeded).await;
    let again = stripe(port, &new_secret_, &succeeded).await;
    let processing = event(
        "evt_pending",
        "payment_intent.processing",
        t,
        intent("pi_pending", pending),
    );
    let pending_stored = stripe(port, &old_secret, &processing).await;
    let charged = event(
        "evt_charged",
        "payment_intent.succeeded",
        t - 60,
        intent("pi_disputed", disputed),
    );
    stripe(port, &old_secret, &charged).await;
    // A dispute names only its payment intent, as Stripe sends it.
    let dispute = json!({"id": "dp_1", "object": "dispute", "payment_intent": "pi_disputed", "status": "needs_response"});
    let opened = stripe(
        port,
        &old_secret,
        &event("evt_dispute", "charge.dispute.created", t, dispute.clone()),
    )
    .await;
    // An older failure of the paid intent arrives late: it undoes nothing.
    let late = stripe(
        port,
        &old_secret,
        &event(
            "evt_late",
            "payment_intent.payment_failed",
            t - 3600,
            intent("pi_paid", paid),
        ),
    )
    .await;
    // A failed payment ends its own object's hold, never the dispute's.
    let failed_intent = stripe(
        port,
        &old_secret,
        &event(
            "evt_failed_dispute",
            "payment_intent.payment_failed",
            t + 1,
            intent("pi_disputed", disputed),
        ),
    )
    .await;

    assert_eq!(stored, (200, "stored".into()));
    assert_eq!(again, (200, "seen".into()), "the same event id twice");
    assert_eq!(pending_stored, (200, "stored".into()));
    assert_eq!(opened, (200, "stored".into()));
    assert_eq!(late, (200, "older".into()));
    assert_eq!(failed_intent, (200, "stored".into()));
    assert_eq!(hold(&world, paid).await.as_deref(), Some("paid"));
    assert_eq!(hold(&world, disputed).await.as_deref(), Some("disputed"));
    assert_eq!(
        tick(&world).await,
        vec![untouched],
        "held invoices are not claimed while the view still says unpaid"
    );
    let explained = crate::signals::explain(&world, paid).await;
    assert_eq!(explained["reason"], "held_by_payment_signal");
    assert!(
        explained["reason_detail"]
            .as_str()
            .unwrap()
            .contains("stripe event evt_paid"),
        "{explained}"
    );
    let (_, audit) = harness::audit(&world).await;
    assert_eq!(
        audit["payment_holds"],
        json!({"paid": 1, "pending": 1, "disputed": 1, "lost": 0, "unlinked": 0})
    );

    // The pending payment fails, and the merchant wins the dispute: the
    // disputed payment stands.
    let failure = stripe(
        port,
        &new_secret_,
        &event(
            "evt_pending_failed",
            "payment_intent.payment_failed",
            t + 5,
            intent("pi_pending", pending),
        ),
    )
    .await;
    let won = json!({"id": "dp_1", "object": "dispute", "payment_intent": "pi_disputed", "status": "won"});
    let closed = stripe(
        port,
        &new_secret_,
        &event("evt_won", "charge.dispute.closed", t + 5, won),
    )
    .await;
    assert_eq!(
        (failure, closed),
        ((200, "stored".into()), (200, "stored".into()))
    );
    assert_eq!(
        tick(&world).await,
        vec![pending],
        "a failed payment's invoice is reminded again; a won dispute's payment stands"
    );
    assert_eq!(hold(&world, disputed).await.as_deref(), Some("paid"));
    assert_eq!(hold(&world, paid).await.as_deref(), Some("paid"));

    let (_, metrics) = get(port, "/metrics").await.unwrap();
    replica.stop_gracefully().await;
    let line = |kind: &str, outcome: &str| {
        sample(
            &metrics,
            &format!(
                r#"invoice_reminder_payment_signals_total{{kind="{kind}",outcome="{outcome}"}}"#
            ),
        )
    };
    assert_eq!(line("paid", "stored"), 3.0, "{metrics}");
    assert_eq!(line("paid", "seen"), 1.0, "{metrics}");
    assert_eq!(line("failed", "older"), 1.0, "{metrics}");
    assert_eq!(line("failed", "stored"), 2.0, "{metrics}");
    assert!(!replica.log().contains(&old_secret) && !replica.log().contains(&new_secret_));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_stale_malformed_and_oversized_signals_are_refused_with_nothing_stored_and_ignored_ones_get_200()
 {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = crate::common::insert_overdue(world.pool(), 1).await;
    let stripe_key = stripe_secret();
    let generic = new_secret();
    let (mut replica, port) = spawn_signals(&mut world, &[&stripe_key], &generic).await;
    let body = event(
        "evt_1",
        "invoice.paid",
        now(),
        json!({"id": "in_1", "metadata": {"invoice_id": ids[0].to_string()}}),
    );

    let unsigned = post(port, "/webhooks/stripe", &[], &body).await.0;
    let wrong_key = post(
        port,
        "/webhooks/stripe",
        &stripe_signed(&stripe_secret(), now(), &body),
        &body,
    )
    .await
    .0;
    let stale = post(
        port,
        "/webhooks/stripe",
        &stripe_signed(&stripe_key, now() - 6 * 60, &body),
        &body,
    )
    .await
    .0;
    let tampered = post(
        port,
        "/webhooks/stripe",
        &stripe_signed(&stripe_key, now(), &body),
        b"{\"id\":\"evt_1\"}",
    )
    .await
    .0;
    let malformed = post(
        port,
        "/webhooks/stripe",
        &stripe_signed(&stripe_key, now(), b"not json"),
        b"not json",
    )
    .await
    .0;
    let no_object = br#"{"id":"evt_2","type":"invoice.paid","created":1}"#;
    let no_object = post(
        port,
        "/webhooks/stripe",
        &stripe_signed(&stripe_key, now(), no_object),
        no_object,
    )
    .await
    .0;
    let mut big = body.clone();
    big.extend(std::iter::repeat_n(b' ', 1024 * 1024));
    let oversized = post(
        port,
        "/webhooks/stripe",
        &stripe_signed(&stripe_key, now(), &big),
        &big,
    )
    .await
    .0;
    let generic_body =
        json!({"invoice_id": ids[0].to_string(), "signal": "maybe", "at": "2026-12-01T10:00:00Z"})
            .to_string();
    let bad_signal = post(
        port,
        "/webhooks/payments",
        &signed(&generic, "msg_1", now(), generic_body.as_bytes()),
        generic_body.as_bytes(),
    )
    .await
    .0;
    let generic_stale = post(
        port,
        "/webhooks/payments",
        &signed(&generic, "msg_2", now() - 6 * 60, generic_body.as_bytes()),
        generic_body.as_bytes(),
    )
    .await
    .0;
    let stored: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM payment_events) + (SELECT count(*) FROM payment_holds)
              + (SELECT count(*) FROM payment_links)",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();

    let other_type = event("evt_3", "customer.created", now(), json!({"id": "cus_1"}));
    let ignored = stripe(port, &stripe_key, &other_type).await;
    let keyless = event(
        "evt_4",
        "invoice.paid",
        now(),
        json!({"id": "in_2", "metadata": {}}),
    );
    let no_invoice = stripe(port, &stripe_key, &keyless).await;
    let lost = json!({"id": "dp_2", "payment_intent": "pi_none", "status": "lost"});
    let dispute_lost = stripe(
        port,
        &stripe_key,
        &event("evt_5", "charge.dispute.closed", now(), lost),
    )
    .await;
    let future = stripe(
        port,
        &stripe_key,
        &event(
            "evt_6",
            "payment_intent.succeeded",
            now() + 3600,
            intent("pi_6", ids[0]),
        ),
    )
    .await;
    let generic_ahead = json!({"invoice_id": ids[0].to_string(), "signal": "paid",
                               "at": (chrono::Utc::now() + chrono::Duration::minutes(6)).to_rfc3339()})
    .to_string();
    let generic_future = post(
        port,
        "/webhooks/payments",
        &signed(&generic, "msg_3", now(), generic_ahead.as_bytes()),
        generic_ahead.as_bytes(),
    )
    .await
    .0;
    let (unlinked, holds): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM payment_events WHERE invoice_id IS NULL),
                (SELECT count(*) FROM payment_holds)",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    let (_, audit) = harness::audit(&world).await;
    let mailed = tick(&world).await;
    replica.stop_gracefully().await;

    assert_eq!(
        [
            unsigned,
            wrong_key,
            stale,
            tampered,
            malformed,
            no_object,
            oversized,
            bad_signal,
            generic_stale
        ],
        [401, 401, 401, 401, 400, 400, 413, 400, 401]
    );
    assert_eq!(stored, 0, "nothing is stored on a 4xx");
    assert_eq!(ignored, (200, "ignored".into()));
    assert_eq!(no_invoice, (200, "unlinked".into()));
    assert_eq!(dispute_lost, (200, "unlinked".into()));
    assert_eq!(
        (future.0, generic_future),
        (400, 400),
        "a time further ahead than payments.tolerance is refused"
    );
    assert_eq!(
        (unlinked, holds),
        (2, 0),
        "signals that name no invoice yet are kept, holding nothing"
    );
    assert_eq!(audit["payment_holds"]["unlinked"], 2, "{audit}");
    assert!(
        replica.log().contains("names no invoice known yet"),
        "logged at warn"
    );
    assert_eq!(mailed, vec![ids[0]], "the worker is unaffected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generic_signal_holds_an_invoice_the_view_shows_later_and_a_pending_one_ends_after_its_hold()
 {
    let mut world = harness::world_for(Backend::Redis).await;
    let ids = crate::common::insert_overdue(world.pool(), 1).await;
    let generic = new_secret();
    let (mut replica, port) = spawn_signals(&mut world, &[], &generic).await;
    let signal = |invoice: String, word: &str, at: chrono::DateTime<chrono::Utc>| {
        json!({"invoice_id": invoice, "signal": word, "at": at.to_rfc3339()}).to_string()
    };
    let send = |id: &'static str, body: String| {
        let generic = generic.clone();
        async move {
            let (status, answer) = post(
                port,
                "/webhooks/payments",
                &signed(&generic, id, now(), body.as_bytes()),
                body.as_bytes(),
            )
            .await;
            (status, answer["outcome"].as_str().unwrap_or("").to_owned())
        }
    };
    let eight_days_ago = chrono::Utc::now() - chrono::Duration::days(8);
    // A bank's debit pending since eight days ago: its 7-day hold is over.
    let expired = send(
        "msg_expired",
        signal(ids[0].to_string(), "pending", eight_days_ago),
    )
    .await;
    // An invoice the view does not show yet.
    let next_id = ids[0] + 1;
    let early = send(
        "msg_early",
        signal(next_id.to_string(), "paid", chrono::Utc::now()),
    )
    .await;
    let later = crate::common::insert_overdue(world.pool(), 1).await;
    let mailed = tick(&world).await;
    let stripe_off = post(port, "/webhooks/stripe", &[], b"{}").await.0;
    let released = send(
        "msg_released",
        signal(next_id.to_string(), "released", chrono::Utc::now()),
    )
    .await;
    let then = tick(&world).await;
    replica.stop_gracefully().await;

    assert_eq!(expired, (200, "stored".into()));
    assert_eq!(early, (200, "stored".into()));
    assert_eq!(later, vec![next_id]);
    assert_eq!(
        mailed,
        vec![ids[0]],
        "the expired pending hold no longer holds; the early signal does"
    );
    assert_eq!(released, (200, "stored".into()));
    assert_eq!(then, vec![next_id]);
    assert_eq!(stripe_off, 404, "a route is off until its secret is set");
}
