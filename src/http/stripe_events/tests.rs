use serde_json::{Value, json};

use super::*;

const KEY: [&str; 2] = ["metadata", "invoice_id"];

fn event(kind: &str, version: Option<&str>, object: Value) -> Vec<u8> {
    let mut e = json!({"id": "evt_1", "object": "event", "type": kind, "created": 1_700_000_000,
                       "data": {"object": object}});
    if let Some(v) = version {
        e["api_version"] = json!(v);
    }
    e.to_string().into_bytes()
}

fn signal(kind: &str, version: Option<&str>, object: Value) -> PaymentSignal {
    match read(&event(kind, version, object), &KEY) {
        Ok(Event::Signal(s, _)) => s,
        other => panic!("{kind}: a signal, not {other:?}"),
    }
}

fn to(object: &str, target: &str) -> PaymentLink {
    PaymentLink {
        object: object.into(),
        to: LinkTo::Object(target.into()),
    }
}

fn ours(object: &str, invoice: &str) -> PaymentLink {
    PaymentLink {
        object: object.into(),
        to: LinkTo::Invoice(InvoiceId::from(invoice)),
    }
}

#[test]
fn a_payment_intent_that_names_our_invoice_holds_it_and_teaches_the_link() {
    let pi = json!({"id": "pi_1", "object": "payment_intent", "metadata": {"invoice_id": "42"}});
    let s = signal(
        "payment_intent.processing",
        Some("2025-05-28.basil"),
        pi.clone(),
    );
    assert_eq!(s.signal, Some(Signal::Pending));
    assert_eq!(s.invoice_id, Some(InvoiceId::from("42")));
    assert_eq!(s.object_id, "pi_1");
    assert_eq!(s.links, [ours("pi_1", "42")]);
    let paid = signal("payment_intent.succeeded", Some("2026-07-29.dahlia"), pi);
    assert_eq!(paid.signal, Some(Signal::Paid));
}

#[test]
fn the_shape_is_chosen_by_the_api_version_not_by_the_fields_present() {
    // Stripe Billing's PaymentIntent before basil names its invoice.
    let pi = json!({"id": "pi_2", "object": "payment_intent", "invoice": "in_2", "metadata": {}});
    let old = signal("payment_intent.processing", Some("2024-06-20"), pi.clone());
    assert_eq!(old.refs, ["pi_2", "in_2"]);
    assert_eq!(old.links, [to("pi_2", "in_2")]);
    let old_paid = signal("payment_intent.succeeded", Some("2024-06-20"), pi.clone());
    assert_eq!(
        old_paid.signal,
        Some(Signal::Paid),
        "one payment pays it all"
    );
    // The same fields under a basil version are not read: basil has none.
    let new = signal(
        "payment_intent.processing",
        Some("2025-03-31.basil"),
        pi.clone(),
    );
    assert_eq!(new.refs, ["pi_2"]);
    assert!(new.links.is_empty());
    let new_paid = signal(
        "payment_intent.succeeded",
        Some("2025-03-31.basil"),
        pi.clone(),
    );
    assert_eq!(
        new_paid.signal,
        Some(Signal::Settled),
        "it may pay part of its invoice"
    );
    // No version: read in the older shape.
    let none = signal("payment_intent.processing", None, pi.clone());
    assert_eq!(none.refs, ["pi_2", "in_2"]);
    assert!(
        read(
            &event("payment_intent.processing", Some("2019-12-03"), pi.clone()),
            &KEY
        )
        .is_err()
    );
    assert!(read(&event("payment_intent.processing", Some("basil"), pi), &KEY).is_err());
}

#[test]
fn every_invoice_event_teaches_its_link_and_a_paid_status_holds() {
    let invoice = json!({"id": "in_3", "object": "invoice", "status": "open",
                         "metadata": {"invoice_id": "7"}, "payment_intent": "pi_3"});
    let finalized = signal("invoice.finalized", Some("2024-06-20"), invoice.clone());
    assert_eq!(finalized.signal, None, "links only");
    assert_eq!(finalized.links, [ours("in_3", "7"), to("pi_3", "in_3")]);
    let mut paid = invoice;
    paid["status"] = json!("paid");
    let s = signal("invoice.paid", Some("2026-07-29.dahlia"), paid);
    assert_eq!(s.signal, Some(Signal::Paid));
    assert_eq!(s.object_id, "in_3");
    assert_eq!(
        s.links,
        [ours("in_3", "7")],
        "basil: no payment_intent read"
    );
}

#[test]
fn an_invoice_payment_links_its_payment_intent_and_ends_its_pending_hold() {
    let payment = json!({"id": "inpay_1", "object": "invoice_payment", "invoice": "in_4",
                         "status": "paid", "amount_paid": 500, "amount_requested": 1000,
                         "payment": {"type": "payment_intent", "payment_intent": "pi_4"}});
    let s = signal("invoice_payment.paid", Some("2025-05-28.basil"), payment);
    assert_eq!(s.signal, Some(Signal::Settled));
    assert_eq!(s.object_id, "pi_4");
    assert_eq!(s.refs, ["pi_4", "in_4"]);
    assert_eq!(s.links, [to("pi_4", "in_4")]);
}

#[test]
fn a_dispute_is_its_own_object_and_its_status_decides() {
    let dispute = |status: &str| {
        json!({"id": "dp_1", "object": "dispute", "charge": "ch_1", "payment_intent": "pi_5",
               "status": status})
    };
    let cases = [
        ("charge.dispute.created", "needs_response", Signal::Disputed),
        (
            "charge.dispute.created",
            "warning_needs_response",
            Signal::Disputed,
        ),
        ("charge.dispute.closed", "won", Signal::Paid),
        ("charge.dispute.closed", "lost", Signal::Lost),
        ("charge.dispute.closed", "warning_closed", Signal::Released),
    ];
    for (kind, status, expected) in cases {
        let s = signal(kind, Some("2024-06-20"), dispute(status));
        assert_eq!(s.signal, Some(expected), "{kind} {status}");
        assert_eq!(s.object_id, "dp_1");
        assert_eq!(s.refs, ["pi_5", "ch_1"]);
    }
    let charge_only =
        json!({"id": "dp_2", "charge": "ch_2", "payment_intent": null, "status": "needs_response"});
    assert_eq!(
        signal("charge.dispute.created", None, charge_only).refs,
        ["ch_2"]
    );
}

#[test]
fn a_checkout_session_holds_and_links_its_payment_intent_to_our_invoice() {
    let session = json!({"id": "cs_1", "object": "checkout.session", "payment_status": "unpaid",
                         "payment_intent": "pi_6", "metadata": {"invoice_id": "9"}});
    let s = signal(
        "checkout.session.completed",
        Some("2025-05-28.basil"),
        session.clone(),
    );
    assert_eq!(s.signal, Some(Signal::Pending));
    assert_eq!(s.links, [ours("cs_1", "9"), ours("pi_6", "9")]);
    let failed = signal(
        "checkout.session.async_payment_failed",
        Some("2025-05-28.basil"),
        session,
    );
    assert_eq!(failed.signal, Some(Signal::Failed));
}

#[test]
fn other_events_and_bad_bodies_are_told_apart() {
    let other = event(
        "customer.created",
        Some("2024-06-20"),
        json!({"id": "cus_1"}),
    );
    assert!(matches!(read(&other, &KEY), Ok(Event::Ignored(_))));
    assert!(read(b"{", &KEY).is_err());
    assert!(read(br#"{"id":"evt_3","type":"invoice.paid"}"#, &KEY).is_err());
}
