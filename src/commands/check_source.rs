//! `check-source`: what the source contract asks for, what
//! `source.relation` has, and how the scan reads it (EXPLAIN), with the
//! index to add when it reads a large table from end to end.

use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::Value;

use super::{UsageError, desk};
use crate::config::Settings;
use crate::operator::desk::Desk;
use crate::operator::source::{
    AMOUNT_COLUMNS, CONTRACT, CUSTOMER_COLUMN, ContractColumn, FoundColumn, OPTIONAL_COLUMNS,
};

/// A sequential scan over a table this large is worth a warning.
const LARGE_TABLE_ROWS: f64 = 10_000.0;

pub async fn check_source(settings: &Settings) -> anyhow::Result<ExitCode> {
    let desk = desk(settings).await?;
    let relation = desk.source_relation();
    outln!("source.relation: {relation}");
    let found = desk
        .source_columns()
        .await
        .context("failed to read the catalog")?;
    let Some(found) = found else {
        outln!("  it does not exist");
        return Err(UsageError(format!(
            "source.relation: relation {relation} does not exist (create the view, or run `invoice-reminder migrate` for the default one)"
        ))
        .into());
    };
    outln!();
    outln!("{:<16} {:<40} {:<20}", "column", "accepted types", "found");
    let customer: &[_] = match desk.reads_customer() {
        true => std::slice::from_ref(&CUSTOMER_COLUMN),
        false => &[],
    };
    for col in CONTRACT
        .iter()
        .chain(AMOUNT_COLUMNS)
        .chain(customer)
        .chain(OPTIONAL_COLUMNS)
    {
        let has = found.iter().find(|f| f.name == col.name);
        let verdict = match has {
            None if AMOUNT_COLUMNS.iter().any(|a| a.name == col.name) => "-".to_owned(),
            None if OPTIONAL_COLUMNS.iter().any(|a| a.name == col.name) => {
                "- (optional)".to_owned()
            }
            None => "MISSING".to_owned(),
            Some(f) if col.types.contains(&f.data_type.as_str()) => format!("{} ok", f.data_type),
            Some(f) => format!("{} WRONG TYPE", f.data_type),
        };
        outln!("{:<16} {:<40} {}", col.name, col.types.join(" | "), verdict);
    }
    outln!("(exactly one of amount_minor and amount)");
    print_extra(&found, customer)?;
    desk.check_source().await?;
    outln!();
    outln!("contract: ok");
    let problems = desk
        .survey()
        .await
        .context("failed to check the source rows")?
        .problems;
    outln!();
    for line in problems.lines() {
        outln!("{line}");
    }
    explain(&desk).await?;
    Ok(ExitCode::SUCCESS)
}

fn print_extra(found: &[FoundColumn], customer: &[ContractColumn]) -> std::io::Result<()> {
    let extra: Vec<&str> = found
        .iter()
        .filter(|f| {
            !CONTRACT
                .iter()
                .chain(AMOUNT_COLUMNS)
                .chain(customer)
                .chain(OPTIONAL_COLUMNS)
                .any(|c| c.name == f.name)
        })
        .map(|f| f.name.as_str())
        .collect();
    if !extra.is_empty() {
        outln!("(not read: {})", extra.join(", "));
    }
    Ok(())
}

/// Prints the scan's plan for the step with the widest window, and a
/// warning for every large table it reads sequentially.
async fn explain(desk: &Desk) -> anyhow::Result<()> {
    let Some(scan) = desk
        .scan_plan()
        .await
        .context("failed to EXPLAIN the scan")?
    else {
        return Ok(());
    };
    let by_customer = scan.step.is_none();
    outln!();
    match &scan.step {
        None => outln!("scan (a page in customer order, EXPLAIN):"),
        Some(step) => outln!("scan (a page of the {step:?} step, EXPLAIN):"),
    }
    let mut seq_scans = Vec::new();
    if let Some(root) = scan.plan.get(0).and_then(|p| p.get("Plan")) {
        print_node(root, 1, &mut seq_scans)?;
    }
    let mut warned = false;
    for (schema, table) in seq_scans {
        let rows = desk
            .estimated_rows(&schema, &table)
            .await
            .context("failed to read table statistics")?;
        if rows >= LARGE_TABLE_ROWS {
            warned = true;
            outln!();
            outln!(
                "warning: the scan reads {schema}.{table} (~{rows:.0} rows) sequentially on every page."
            );
            if by_customer {
                outln!(
                    "Add an index on the columns your view exposes as customer_id and due_date, over unpaid rows:"
                );
                outln!(
                    "  CREATE INDEX CONCURRENTLY {table}_reminder_customers ON {schema}.{table} ((<customer column>::text), <due date column>) WHERE <not paid>;"
                );
            } else {
                outln!(
                    "Add an index on the columns your view exposes as due_date and invoice_id, over unpaid rows:"
                );
                outln!(
                    "  CREATE INDEX CONCURRENTLY {table}_reminder_scan ON {schema}.{table} (<due date column>, (<key column>::text) COLLATE \"C\") WHERE <not paid>;"
                );
            }
            outln!("(README, \"Using your own invoices\": index advice)");
        }
    }
    if !warned {
        outln!();
        outln!("scan: no sequential scan over a large table");
    }
    Ok(())
}

/// Prints one plan node and its children, indented; collects the tables
/// read by sequential scans.
fn print_node(
    node: &Value,
    depth: usize,
    seq_scans: &mut Vec<(String, String)>,
) -> std::io::Result<()> {
    let kind = node.get("Node Type").and_then(Value::as_str).unwrap_or("?");
    let relation = node.get("Relation Name").and_then(Value::as_str);
    let schema = node.get("Schema").and_then(Value::as_str);
    let index = node.get("Index Name").and_then(Value::as_str);
    let rows = node.get("Plan Rows").and_then(Value::as_f64).unwrap_or(0.0);
    let mut line = format!("{}{kind}", "  ".repeat(depth));
    if let (Some(schema), Some(relation)) = (schema, relation) {
        line.push_str(&format!(" on {schema}.{relation}"));
        if kind == "Seq Scan" {
            seq_scans.push((schema.to_owned(), relation.to_owned()));
        }
    }
    if let Some(index) = index {
        line.push_str(&format!(" using {index}"));
    }
    outln!("{line} (rows={rows:.0})");
    if let Some(children) = node.get("Plans").and_then(Value::as_array) {
        for child in children {
            print_node(child, depth + 1, seq_scans)?;
        }
    }
    Ok(())
}
