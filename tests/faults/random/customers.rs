//! The promise in customer mode, from the statements the servers received
//! and from the reminders table: every clean owed (invoice, step) listed
//! exactly once across the statements, nothing else listed, a suppressed
//! customer's steps recorded `skipped`, and no customer mailed twice within
//! `min_days_between` but for a statement's own continuation.

use std::collections::{BTreeMap, BTreeSet};

use invoice_reminder::domain::InvoiceId;
use invoice_reminder::mail::message::id_token;

use super::source::Expected;
use super::ticks::Lab;

pub async fn check_promise(lab: &Lab<'_>, expected: &Expected) {
    let context = lab.context();
    let report = lab.audit().await;
    assert_eq!(
        report["duplicates"].as_array().map(Vec::len),
        Some(0),
        "{context}\naudit: {report}"
    );
    assert_eq!(
        report["unknown"].as_array().map(Vec::len),
        Some(0),
        "{context}\nunknown after the operator settled them: {report}"
    );

    let listings = lab.listings();
    let mut by_id: BTreeMap<&str, usize> = BTreeMap::new();
    for (id, _, _) in &listings {
        *by_id.entry(id.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = by_id.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{context}\nMessage-IDs received more than once: {twice:?}"
    );
    // Each (invoice, step) as the statements list it: the key as the
    // X-Invoice-Id header writes it.
    let mut listed: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (id, invoices, steps) in &listings {
        assert!(
            id.starts_with("statement-"),
            "{context}\nnot a statement: {id}"
        );
        let invoices: Vec<&str> = invoices.split(',').map(str::trim).collect();
        let steps: Vec<&str> = steps.split(',').map(str::trim).collect();
        assert_eq!(
            invoices.len(),
            steps.len(),
            "{context}\n{id}: {invoices:?} {steps:?}"
        );
        for (invoice, step) in invoices.into_iter().zip(steps) {
            *listed
                .entry((invoice.to_owned(), step.to_owned()))
                .or_default() += 1;
        }
    }
    let token = |key: &str| id_token(&InvoiceId(key.to_owned()));
    let wanted: BTreeSet<(String, String)> = expected
        .owed
        .iter()
        .map(|(key, step)| (token(key), step.clone()))
        .collect();
    let twice: Vec<_> = listed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{context}\nlisted more than once: {twice:?}"
    );
    let missing: Vec<_> = wanted.iter().filter(|k| !listed.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "{context}\nclean owed steps never mailed: {missing:?}"
    );
    let unexpected: Vec<_> = listed.keys().filter(|k| !wanted.contains(*k)).collect();
    assert!(
        unexpected.is_empty(),
        "{context}\nmailed but not a clean owed step: {unexpected:?}"
    );

    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM reminders GROUP BY status ORDER BY status")
            .fetch_all(lab.world.pool())
            .await
            .expect("statuses");
    let mut want = vec![("sent".to_owned(), expected.owed.len() as i64)];
    if !expected.suppressed.is_empty() {
        want.push(("skipped".to_owned(), expected.suppressed.len() as i64));
    }
    want.retain(|(_, n)| *n > 0);
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT concat_ws(' ', invoice_id, period, status, 'customer', customer_id,
                'continued', continued, 'run', run_id, 'attempts', attempts,
                'claimed', to_char(claimed_at, 'HH24:MI:SS.MS'), last_error)
           FROM reminders ORDER BY customer_id, claimed_at, id",
    )
    .fetch_all(lab.world.pool())
    .await
    .expect("rows");
    assert_eq!(
        statuses,
        want,
        "{context}\nreminders by status; the rows:\n{}",
        rows.join("\n")
    );

    check_gap(lab, &context).await;
}

/// Within `min_days_between`, a customer's statements (by Message-ID, in
/// the order they were first formed: the newest row each lists; an unknown
/// one settled or resent later keeps its place) are one round: each but
/// the last left owed invoices for the next tick (`continued`).
async fn check_gap(lab: &Lab<'_>, context: &str) {
    let gap: i32 = lab.world.settings().reminders.min_days_between as i32;
    if gap == 0 {
        return;
    }
    let statements: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT customer_id, message_id, bool_and(continued)
           FROM reminders WHERE status = 'sent'
          GROUP BY customer_id, message_id ORDER BY customer_id, max(created_at)",
    )
    .fetch_all(lab.world.pool())
    .await
    .expect("statements");
    let mut by_customer: BTreeMap<&str, Vec<(&str, bool)>> = BTreeMap::new();
    for (customer, id, continued) in &statements {
        by_customer
            .entry(customer.as_str())
            .or_default()
            .push((id.as_str(), *continued));
    }
    for (customer, sent) in by_customer {
        let Some((_, before_last)) = sent.split_last() else {
            continue;
        };
        let ended: Vec<_> = before_last
            .iter()
            .filter(|(_, continued)| !continued)
            .collect();
        assert!(
            ended.is_empty(),
            "{context}\ncustomer {customer} got another statement within the gap after one that left nothing for the next tick: {sent:?}"
        );
    }
}
