//! Customer mode's pages: the pages of the source a tick walks, each with
//! its suppressed addresses. Each read is timed for the tick's account;
//! none claims anything. Invoice mode reads each page in its claim's
//! transaction (`by_invoice.rs`).

use std::collections::HashSet;

use super::claiming::Claiming;
use crate::db;
use crate::db::customers::{CustomerPage, CustomerRow};
use crate::tick::timings::Spent;
use crate::tick::{TickError, db_err};

/// Customer mode: a page of whole customers, the customer the next page
/// starts after (None: this was the last page), and the page's addresses
/// on the suppression list (lower-cased), read with it.
pub(super) struct Customers {
    pub rows: Vec<CustomerRow>,
    pub next: Option<String>,
    pub suppressed: HashSet<String>,
}

/// Customer mode: the page after customer `after`, of as many rows as the
/// tick may still claim besides `pending` (rows being claimed meanwhile),
/// cut at a customer boundary. A page that may end inside its last
/// customer leaves that customer to the next page; a customer whose unpaid
/// invoices fill a page alone is read by key, all of it. Ok(None): stop
/// (stopped, or `max_per_tick` reached); an empty page has no rows and no
/// next.
pub(super) async fn customer_page(
    c: &Claiming,
    after: Option<String>,
    pending: usize,
) -> Result<Option<Customers>, TickError> {
    let Some(limit) = c.room(pending) else {
        return Ok(None);
    };
    let reading = db::customers::fetch_customer_page(
        &c.p().ctx().db,
        c.today(),
        c.retries(),
        after.as_deref(),
        limit,
    );
    let page = c
        .p()
        .timings()
        .time(Spent::ClaimStatements, reading)
        .await
        .map_err(db_err("reading the invoices that owe a reminder"))?;
    let full = page.customers.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
    let CustomerPage {
        mut owed,
        customers,
        suppressed,
        ..
    } = page;
    let Some(last) = customers.last().cloned() else {
        return Ok(Some(Customers {
            rows: Vec::new(),
            next: None,
            suppressed,
        }));
    };
    if !full {
        return Ok(Some(Customers {
            rows: owed,
            next: None,
            suppressed,
        }));
    }
    if let Some(before) = customers.iter().rev().find(|c| **c != last) {
        owed.retain(|r| r.row.customer_id.as_ref() != Some(&last));
        return Ok(Some(Customers {
            rows: owed,
            next: Some(before.clone()),
            suppressed,
        }));
    }
    let (rows, suppressed) = whole_customer(c, &last, limit).await?;
    Ok(Some(Customers {
        rows,
        next: Some(last),
        suppressed,
    }))
}

/// Every row of `customer` that owes a step (or is kept back from one),
/// read `limit` rows at a time, and their suppressed addresses.
async fn whole_customer(
    c: &Claiming,
    customer: &str,
    limit: u32,
) -> Result<(Vec<CustomerRow>, HashSet<String>), TickError> {
    let reading = db::customers::fetch_whole_customer(
        &c.p().ctx().phases.claims,
        c.today(),
        c.retries(),
        customer,
        limit,
    );
    c.p()
        .timings()
        .time(Spent::ClaimStatements, reading)
        .await
        .map_err(db_err(
            "reading the invoices of a customer that owes a reminder",
        ))
}
