//! Reading the window: the pages of the source a tick walks, and the
//! suppression list for the addresses on them. Each read is timed for the
//! tick's diagnostics; none claims anything.

use std::collections::HashSet;

use super::claiming::Claiming;
use crate::db::customers::{CustomerPage, CustomerRow};
use crate::db::invoices::{OverdueKey, OwedPage};
use crate::db::{self, Db};
use crate::domain::Recipients;
use crate::stages::Window;
use crate::tick::timings::Spent;
use crate::tick::{TickError, db_err};

/// Invoice mode: the next `limit` unpaid rows of `window` after `after`.
pub(super) async fn invoice_page(
    c: &Claiming,
    window: &Window,
    after: Option<OverdueKey>,
    limit: u32,
) -> Result<OwedPage, TickError> {
    let reading =
        db::invoices::fetch_owed_page(&c.p().ctx().phases.claims, window, c.today(), after, limit);
    c.p()
        .timings()
        .time(Spent::ClaimPages, reading)
        .await
        .map_err(db_err("reading the invoices that owe a reminder"))
}

/// Customer mode: a page of whole customers, and the customer the next
/// page starts after (None: this was the last page).
pub(super) struct Customers {
    pub rows: Vec<CustomerRow>,
    pub next: Option<String>,
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
        .time(Spent::ClaimPages, reading)
        .await
        .map_err(db_err("reading the invoices that owe a reminder"))?;
    let full = page.customers.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
    let CustomerPage {
        mut owed,
        customers,
        ..
    } = page;
    let Some(last) = customers.last().cloned() else {
        return Ok(Some(Customers {
            rows: Vec::new(),
            next: None,
        }));
    };
    if !full {
        return Ok(Some(Customers {
            rows: owed,
            next: None,
        }));
    }
    if let Some(before) = customers.iter().rev().find(|c| **c != last) {
        owed.retain(|r| r.row.customer_id.as_ref() != Some(&last));
        return Ok(Some(Customers {
            rows: owed,
            next: Some(before.clone()),
        }));
    }
    Ok(Some(Customers {
        rows: whole_customer(c, &last, limit).await?,
        next: Some(last),
    }))
}

/// Every row of `customer` that owes a step (or is held back from one),
/// read `limit` rows at a time.
async fn whole_customer(
    c: &Claiming,
    customer: &str,
    limit: u32,
) -> Result<Vec<CustomerRow>, TickError> {
    let reading = db::customers::fetch_whole_customer(
        &c.p().ctx().phases.claims,
        c.today(),
        c.retries(),
        customer,
        limit,
    );
    c.p()
        .timings()
        .time(Spent::ClaimPages, reading)
        .await
        .map_err(db_err(
            "reading the invoices of a customer that owes a reminder",
        ))
}

/// The addresses on `rows` that are on the suppression list, lower-cased
/// (one statement).
pub(super) async fn suppressed_on(
    c: &Claiming,
    rows: &[CustomerRow],
) -> Result<HashSet<String>, TickError> {
    suppressed_addresses(
        &c.p().ctx().db,
        rows.iter().filter_map(|r| r.row.customer_email.as_deref()),
    )
    .await
    .map_err(db_err("reading the suppression list"))
}

/// The addresses of `cells` (source `email` cells; a cell that does not
/// parse has none) that are on the suppression list, lower-cased: one
/// statement.
pub async fn suppressed_addresses<'a>(
    db: &Db,
    cells: impl Iterator<Item = &'a str>,
) -> Result<HashSet<String>, sqlx::Error> {
    let mut asked: Vec<String> = cells
        .filter_map(|cell| Recipients::parse(cell).ok())
        .flat_map(|r| {
            r.addresses()
                .iter()
                .map(|a| a.to_string().to_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    asked.sort_unstable();
    asked.dedup();
    Ok(db::suppressions::suppressed_among(db, &asked)
        .await?
        .into_iter()
        .collect())
}
