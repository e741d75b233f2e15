//! `settle` (also `resolve`): settle unknown deliveries without writing
//! SQL. `--sent` once
//! the mail server's log shows the stored Message-ID went out, `--resend`
//! once it shows it did not. What is settled, and each line printed, is
//! decided by `operator::settle`; exit 1 when a named row was refused.

use std::process::ExitCode;

use super::{desk, exit};
use crate::config::Settings;
use crate::domain::ReminderId;
use crate::operator::Actor;
use crate::operator::settle::{self as settling, Named, Settlement};

pub async fn settle(
    settings: &Settings,
    sent: Vec<i64>,
    resend: Vec<i64>,
) -> anyhow::Result<ExitCode> {
    let desk = desk(settings).await?;
    desk.check_source().await?;
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
    let settled = settling::settle(&desk, &named, settlement, Actor::CommandLine, None).await?;
    for line in &settled.notes {
        outln!("{line}");
    }
    Ok(if settled.refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    })
}
