//! `resolve`: settle unknown deliveries without writing SQL. `--sent` once
//! the mail server's log shows the stored Message-ID went out, `--resend`
//! once it shows it did not. What is settled, and each line printed, is
//! decided by `operator::settle`; exit 1 when a named row was refused.

use std::process::ExitCode;

use super::{connect, exit};
use crate::config::Settings;
use crate::db::resolve::Settlement;
use crate::domain::ReminderId;
use crate::operator::Actor;
use crate::operator::settle::{Named, settle};

pub async fn resolve(
    settings: &Settings,
    sent: Vec<i64>,
    resend: Vec<i64>,
) -> anyhow::Result<ExitCode> {
    let database = connect(settings).await?;
    super::check_source(&database).await?;
    let settlement = if resend.is_empty() {
        Settlement::Sent
    } else {
        Settlement::Resend
    };
    let named = Named::Reminders(
        sent.iter()
            .chain(&resend)
            .copied()
            .map(ReminderId)
            .collect(),
    );
    let settled = settle(
        &database,
        settings,
        &named,
        settlement,
        Actor::CommandLine,
        None,
    )
    .await?;
    for line in &settled.notes {
        outln!("{line}");
    }
    Ok(if settled.refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    })
}
