//! `dkim-record`: the DNS TXT record that publishes `[smtp.dkim]`'s public
//! key (the key itself was loaded and checked with the settings).

use std::process::ExitCode;

use super::UsageError;
use crate::config::Settings;

/// Prints the DNS record for `[smtp.dkim]`'s key (loaded and checked with
/// the settings); usage error when DKIM is off.
pub fn dkim_record(settings: &Settings) -> anyhow::Result<ExitCode> {
    let Some(dkim) = settings.smtp.dkim.loaded() else {
        return Err(UsageError(
            "DKIM is not configured: set smtp.dkim.domain, smtp.dkim.selector and smtp.dkim.private_key_file".to_owned(),
        )
        .into());
    };
    outln!("{}", dkim.txt_record());
    Ok(ExitCode::SUCCESS)
}
