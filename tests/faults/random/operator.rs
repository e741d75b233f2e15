//! What the operator does once the faults are over: waits until no run
//! can still write a result, then settles each unknown delivery by looking
//! its Message-ID up in what the SMTP servers received (`resolve --sent`
//! if it went out, `--resend` if not), as the README tells them to.

use std::time::Duration;

use serde_json::Value;

use super::ticks::{Lab, describe};
use crate::common;
use crate::harness;

impl Lab<'_> {
    /// Waits until every run is over for good (finished, or its lease
    /// past by the database clock) and the sink has answered everything
    /// it was sent: what audit then lists as unknown stays unknown.
    pub async fn wait_until_quiet(&self) {
        let world = self.world;
        common::wait_until(
            "every run is over for good",
            Duration::from_secs(60),
            || async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM job_runs
                      WHERE finished_at IS NULL AND NOT coalesce(lease_until < now(), false)",
                )
                .fetch_one(world.pool())
                .await
                .expect("count live runs")
                    == 0
            },
        )
        .await;
        common::wait_until(
            "the sink has answered every message",
            Duration::from_secs(30),
            || async move { world.sink.answering() == 0 },
        )
        .await;
    }

    /// `audit --json --unknown-after 0s`, checked for a clean exit.
    pub async fn audit(&self) -> Value {
        let (code, report) = harness::audit(self.world).await;
        assert_eq!(code, 0, "{}\naudit: {report}", self.context());
        report
    }

    /// What an operator does with unknown deliveries: looks each mail's
    /// Message-ID up in the servers' logs, then `resolve --sent` what went
    /// out and `resolve --resend` what did not (one reminder of a mail
    /// settles all of it). A mail that never reached a server must come
    /// from a run that was killed or lost its database until it exited:
    /// any other run returns what it never sent.
    pub async fn settle_unknown(&mut self) {
        self.wait_until_quiet().await;
        let report = self.audit().await;
        let received = self.message_ids();
        let (mut sent, mut resend) = (Vec::new(), Vec::new());
        for mail in report["unknown_mails"].as_array().expect("unknown mails") {
            let id = mail["reminder_ids"][0]
                .as_i64()
                .expect("reminder_id")
                .to_string();
            let message_id = mail["message_id"].as_str().expect("a stored Message-ID");
            if received.iter().any(|r| r == message_id) {
                sent.push(id);
            } else {
                let run = mail["run_id"].as_i64().unwrap_or_default();
                assert!(
                    self.may_leave_unsent.contains(&run),
                    "{}\nrun {run}, neither killed nor cut from its database, left a mail it never sent unknown: {mail}",
                    self.context()
                );
                resend.push(id);
            }
        }
        self.note(format!(
            "operator: {} unknown mail(s), resolve --sent {sent:?} --resend {resend:?}",
            sent.len() + resend.len()
        ));
        for (flag, ids) in [("--sent", &sent), ("--resend", &resend)] {
            if ids.is_empty() {
                continue;
            }
            let mut args = vec!["resolve", flag];
            args.extend(ids.iter().map(String::as_str));
            let out = common::cli(self.world, &args).await;
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && !stderr.contains("panicked"),
                "{}\nresolve {flag} {ids:?} ended with {}:\n{}{stderr}",
                self.context(),
                describe(out.status),
                common::stdout(&out)
            );
        }
    }
}
