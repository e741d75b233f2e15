//! `next`: the schedule's next fires, in the schedule's zone and in UTC,
//! computed by the same function the run loop uses.

use std::process::ExitCode;

use super::UsageError;
use crate::config::Settings;

/// `next`: the schedule's next fires, from `schedule::next_fires`.
pub fn next(
    settings: &Settings,
    count: usize,
    from: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use chrono::SecondsFormat;
    let after = match from {
        Some(text) => chrono::DateTime::parse_from_rfc3339(text.trim())
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|e| UsageError(format!("--from {text:?} is not an RFC 3339 instant: {e}")))?,
        None => chrono::Utc::now(),
    };
    let fires: Vec<(String, String)> =
        crate::schedule::next_fires(&settings.schedule, after, count)
            .into_iter()
            .map(|f| {
                (
                    f.to_rfc3339_opts(SecondsFormat::Secs, false),
                    f.with_timezone(&chrono::Utc)
                        .to_rfc3339_opts(SecondsFormat::Secs, true),
                )
            })
            .collect();
    if json {
        let list: Vec<serde_json::Value> = fires
            .iter()
            .map(|(local, utc)| serde_json::json!({"local": local, "utc": utc}))
            .collect();
        outln!("{}", serde_json::Value::Array(list));
    } else {
        for (local, utc) in &fires {
            outln!("{local} {utc}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
