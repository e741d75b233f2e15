//! `explain`: prints why an invoice did or did not get a reminder, and
//! when it will get the next one, as text or JSON (`--json`, field names a
//! contract), or the archived bytes of its latest sent reminder (`--raw`).
//! What it says is decided by `operator::explain`; this file prints it and
//! sets the exit code (1 when the invoice or customer is not in the source).

mod text;

use std::process::ExitCode;

use anyhow::Context as _;

use super::exit;
use crate::config::Settings;
use crate::domain::InvoiceId;
use crate::operator::archive::Archived;
use crate::operator::db_failed;
use crate::operator::desk::Desk;
use crate::operator::explain::report::{self, Explained, RowState};
use crate::operator::explain::{check_customer_column, explain_customer, explain_invoice};

/// How many of a customer's invoices `--customer` explains at most.
const CUSTOMER_INVOICES: u32 = 1_000;

/// What to explain.
pub enum Target {
    Invoice(String),
    Customer(String),
}

/// `explain --raw`: the archived bytes of the invoice's latest sent
/// reminder (`archive.store = "database"`), as sent. Exit 1 when there is
/// none in the archive.
async fn print_raw(desk: &Desk, explained: &Explained) -> anyhow::Result<ExitCode> {
    let latest = explained
        .reminders
        .iter()
        .rev()
        .find(|r| r.state == RowState::Sent)
        .and_then(|r| r.row.message_id.clone());
    let Some(message_id) = latest else {
        outln!("invoice {} has no sent reminder", explained.invoice_id);
        return Ok(ExitCode::from(exit::FAILURE));
    };
    let archived = desk
        .archived(&message_id)
        .await
        .map_err(db_failed("failed to read the message archive"))?;
    match archived {
        Archived::Kept(message) => {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            out.write_all(&message.bytes)
                .and_then(|()| out.flush())
                .context("failed to print the archived message")?;
            Ok(ExitCode::SUCCESS)
        }
        Archived::NotKept(sentence) => {
            outln!("{sentence}");
            Ok(ExitCode::from(exit::FAILURE))
        }
        Archived::Damaged(why) => Err(anyhow::anyhow!(why)),
    }
}

pub async fn explain(
    settings: &Settings,
    target: Target,
    json: bool,
    raw: bool,
) -> anyhow::Result<ExitCode> {
    let desk = super::desk(settings).await?;
    desk.check_source().await?;
    let today = desk
        .today()
        .await
        .context("failed to read the database clock")?;
    match target {
        Target::Invoice(id) => {
            let id = InvoiceId::from(id.trim());
            let explained = explain_invoice(&desk, &id).await?;
            if raw {
                return print_raw(&desk, &explained).await;
            }
            if json {
                let text = serde_json::to_string_pretty(&explained)
                    .context("failed to encode the explanation")?;
                outln!("{text}");
            } else {
                text::print_text(&explained)?;
            }
            Ok(exit_for(explained.is_known()))
        }
        Target::Customer(customer) => {
            let customer = customer.trim();
            check_customer_column(&desk).await?;
            let explained = explain_customer(&desk, customer, CUSTOMER_INVOICES)
                .await?
                .invoices;
            if json {
                let report = serde_json::json!({
                    "customer_id": customer,
                    "today": today,
                    "invoices": explained,
                });
                let text = serde_json::to_string_pretty(&report)
                    .context("failed to encode the explanation")?;
                outln!("{text}");
            } else {
                outln!(
                    "customer {customer}: {} in source.relation",
                    report::count(
                        i64::try_from(explained.len()).unwrap_or(i64::MAX),
                        "invoice"
                    )
                );
                for e in &explained {
                    outln!();
                    text::print_text(e)?;
                }
            }
            Ok(exit_for(!explained.is_empty()))
        }
    }
}

fn exit_for(known: bool) -> ExitCode {
    if known {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    }
}
