//! Ticks as the operator runs them (`invoice-reminder run-once`, one tick
//! per process), each with at most one fault injected while it runs.
//! Every process is checked as it ends: no panic, no crash, an exit code
//! its fault allows.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::time::Instant;

use super::rng::Rng;
use crate::common::proxy::{Mode as ProxyMode, Proxy};
use crate::common::relay::{Relay, RelayOptions};
use crate::common::{self, Backend, SmtpMode, World};
use crate::harness::{Replica, ReplicaOptions};

/// When a mid-tick fault strikes.
#[derive(Debug, Clone, Copy)]
pub enum Trigger {
    /// Once the run is recorded (before or while it claims).
    RunStarted,
    /// Once the run has claimed a row.
    Claimed,
    /// Once the SMTP server has taken this many more messages.
    Mails(usize),
}

/// How the database path fails.
#[derive(Debug, Clone, Copy)]
pub enum DbFault {
    /// Every open connection is cut; new ones get through.
    Cut,
    /// All traffic held until the tick has logged an error.
    Stall,
    /// Connections cut and refused until the tick has logged an error.
    Down,
    /// Down until the process has exited (its results unwritten).
    DownUntilExit,
}

/// At most one fault per tick.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    None,
    /// SIGKILL of the process mid-tick.
    Kill(Trigger),
    /// The SMTP server answers 451 to every message.
    Refuse4xx,
    /// The tick sends through a relay that answers 421 at once beyond
    /// `max` connections (optionally before the accepted ones greet).
    Relay {
        max: usize,
        hold_greeting: bool,
    },
    /// The database path fails mid-tick.
    Database(DbFault, Trigger),
}

impl Fault {
    /// A fault of each kind, then a few more, in a random order.
    pub fn plan(rng: &mut Rng) -> Vec<Fault> {
        let mut plan = vec![
            Self::Kill(trigger(rng)),
            Self::Refuse4xx,
            Self::relay(rng),
            Self::database(rng),
        ];
        for _ in 0..rng.below(3) {
            plan.push(match rng.below(5) {
                0 => Self::None,
                1 => Self::Kill(trigger(rng)),
                2 => Self::relay(rng),
                3 => Self::database(rng),
                _ => Self::Refuse4xx,
            });
        }
        for i in (1..plan.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            plan.swap(i, j);
        }
        plan
    }

    fn relay(rng: &mut Rng) -> Self {
        Self::Relay {
            max: rng.range(1, 3) as usize,
            hold_greeting: rng.chance(50),
        }
    }

    /// `DownUntilExit` costs the process's exit wait (10 s): rarer.
    fn database(rng: &mut Rng) -> Self {
        let fault = match rng.below(7) {
            0 | 1 => DbFault::Cut,
            2 | 3 => DbFault::Stall,
            4 | 5 => DbFault::Down,
            _ => DbFault::DownUntilExit,
        };
        Self::Database(fault, trigger(rng))
    }
}

fn trigger(rng: &mut Rng) -> Trigger {
    match rng.below(4) {
        0 => Trigger::RunStarted,
        1 => Trigger::Claimed,
        _ => Trigger::Mails(rng.range(1, 4) as usize),
    }
}

/// One seed's world, its extra servers, and every process it ran.
pub struct Lab<'a> {
    pub seed: u64,
    pub grouping: super::Grouping,
    /// Runs that may leave rows started and never sent unknown: killed, or
    /// cut from the database until they exited.
    pub may_leave_unsent: Vec<i64>,
    pub world: &'a World,
    pub backend: Backend,
    /// The sink's mode between faults.
    pub sink_mode: SmtpMode,
    /// A proxy before PostgreSQL and the URL through it, once needed.
    proxy: Option<(Proxy, String)>,
    /// Every relay a tick sent through (their mail counts too).
    relays: Vec<Relay>,
    /// What happened so far, for failure messages.
    pub history: Vec<String>,
    ticks: usize,
}

impl<'a> Lab<'a> {
    pub fn new(
        seed: u64,
        grouping: super::Grouping,
        world: &'a World,
        backend: Backend,
        sink_mode: SmtpMode,
    ) -> Self {
        world.sink.set_mode(sink_mode.clone());
        Self {
            seed,
            grouping,
            may_leave_unsent: Vec::new(),
            world,
            backend,
            sink_mode,
            proxy: None,
            relays: Vec::new(),
            history: Vec::new(),
            ticks: 0,
        }
    }

    /// The seed, how to rerun it, and what happened: every failure
    /// message starts with this.
    pub fn context(&self) -> String {
        format!(
            "seed {seed} (rerun: {}); so far:\n  {}",
            super::rerun(self.seed, self.grouping),
            self.history.join("\n  "),
            seed = self.seed
        )
    }

    pub fn note(&mut self, what: impl Into<String>) {
        self.history.push(what.into());
    }

    /// Every Message-ID that reached an SMTP server (sink and relays), in
    /// arrival order per server, without angle brackets.
    pub fn message_ids(&self) -> Vec<String> {
        let bare = |id: &str| {
            id.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned()
        };
        let mut ids: Vec<String> = self
            .world
            .sink
            .received()
            .iter()
            .map(|m| bare(m.header("Message-ID").unwrap_or("?")))
            .collect();
        for relay in &self.relays {
            let from_relay = relay.message_ids();
            assert_eq!(
                from_relay.len(),
                relay.messages(),
                "{}: a relayed message without a Message-ID",
                self.context()
            );
            ids.extend(from_relay.iter().map(|id| bare(id)));
        }
        ids
    }

    /// The `X-Invoice-Id` and `X-Reminder-Period` headers of every
    /// message that reached an SMTP server (sink and relays), with its
    /// Message-ID (without angle brackets).
    pub fn listings(&self) -> Vec<(String, String, String)> {
        let mut out: Vec<(String, String, String)> = self
            .world
            .sink
            .received()
            .iter()
            .map(|m| {
                let h = |name: &str| m.header(name).unwrap_or_default().trim().to_owned();
                (
                    h("Message-ID")
                        .trim_start_matches('<')
                        .trim_end_matches('>')
                        .to_owned(),
                    h("X-Invoice-Id"),
                    h("X-Reminder-Period"),
                )
            })
            .collect();
        for relay in &self.relays {
            out.extend(relay.listings());
        }
        out
    }

    /// Messages the relays took.
    fn relayed(&self) -> usize {
        self.relays.iter().map(Relay::messages).sum()
    }

    /// Runs one tick (`run-once`) with `fault`, and `env` on top of the
    /// world's settings.
    pub async fn tick(&mut self, fault: Fault, env: &[(String, String)]) {
        self.ticks += 1;
        let name = format!("t{}", self.ticks);
        self.wait_lock_free().await;
        let last_run = self.last_run_id().await;
        let mails_before = self.world.sink.count();
        let relayed_before = self.relayed();
        let mut env = env.to_vec();
        match fault {
            Fault::Refuse4xx => self.world.sink.set_mode(SmtpMode::Refuse4xx),
            Fault::Relay { max, hold_greeting } => {
                let relay = Relay::start(RelayOptions {
                    max_connections: Some(max),
                    hold_greeting: hold_greeting.then_some(Duration::from_secs(1)),
                    ..RelayOptions::default()
                })
                .await;
                env.extend(vars(&[
                    ("SMTP__PORT", &relay.port.to_string()),
                    ("SMTP__POOL_SIZE", "8"),
                    ("REMINDERS__SEND_CONCURRENCY", "8"),
                ]));
                self.relays.push(relay);
            }
            Fault::Database(..) => {
                let via = self.proxied_url().await;
                env.extend(vars(&[
                    ("DATABASE__URL", &via),
                    ("DATABASE__STATEMENT_TIMEOUT", "1s"),
                    ("DATABASE__CONNECT_TIMEOUT", "1s"),
                ]));
            }
            Fault::None | Fault::Kill(_) => {}
        }
        let mut process = Replica::spawn(
            self.world,
            &name,
            ReplicaOptions {
                env,
                command: vec!["run-once".to_owned()],
                ..ReplicaOptions::default()
            },
        );
        let struck = match fault {
            Fault::Kill(trigger) | Fault::Database(_, trigger) => {
                self.wait_for(&mut process, trigger, last_run, mails_before)
                    .await
            }
            _ => false,
        };
        match fault {
            Fault::Kill(_) if struck => process.kill(),
            Fault::Database(db_fault, _) if struck => {
                self.break_database(&mut process, db_fault).await
            }
            _ => {}
        }
        let status = match process.wait_exit(Duration::from_secs(120)).await {
            Some(status) => status,
            None => panic!(
                "{}\n{name} ({fault:?}) did not exit within 2 minutes:\n{}",
                self.context(),
                process.log()
            ),
        };
        self.world.sink.set_mode(self.sink_mode.clone());
        let log = process.log();
        let run = self.last_run_id().await;
        if struck
            && matches!(
                fault,
                Fault::Kill(_) | Fault::Database(DbFault::DownUntilExit, _)
            )
        {
            self.may_leave_unsent.extend(last_run + 1..=run);
        }
        self.note(format!(
            "{name}: {fault:?}{} -> {}, run {}, {} mail(s) at the sink, {} at relays",
            if struck { " (struck)" } else { "" },
            describe(status),
            if run > last_run {
                run.to_string()
            } else {
                "none".into()
            },
            self.world.sink.count() - mails_before,
            self.relayed() - relayed_before,
        ));
        assert!(
            !log.contains("panicked"),
            "{}\n{name} panicked:\n{log}",
            self.context()
        );
        let allowed = match (fault, struck) {
            // Killed, or done just before the signal.
            (Fault::Kill(_), true) => {
                status.signal() == Some(libc::SIGKILL) || status.code() == Some(0)
            }
            (Fault::None, _) | (Fault::Kill(_), false) => status.code() == Some(0),
            // A fault may fail the tick (exit 1), never crash it.
            _ => matches!(status.code(), Some(0 | 1)),
        };
        assert!(
            allowed,
            "{}\n{name} ({fault:?}) ended with {}:\n{log}",
            self.context(),
            describe(status)
        );
    }

    /// Waits until `trigger` (true) or the process has exited (false).
    async fn wait_for(
        &self,
        process: &mut Replica,
        trigger: Trigger,
        last_run: i64,
        mails_before: usize,
    ) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let hit = match trigger {
                Trigger::Mails(n) => self.world.sink.count() >= mails_before + n,
                Trigger::RunStarted => self.last_run_id().await > last_run,
                Trigger::Claimed => {
                    sqlx::query_scalar::<_, i64>("SELECT count(*) FROM reminders WHERE run_id > $1")
                        .bind(last_run)
                        .fetch_one(self.world.pool())
                        .await
                        .expect("count claims")
                        > 0
                }
            };
            if hit {
                return true;
            }
            if !process.is_running() {
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "{}\nwaited a minute for {trigger:?}:\n{}",
                self.context(),
                process.log()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn break_database(&mut self, process: &mut Replica, fault: DbFault) {
        let (proxy, _) = self.proxy.as_ref().expect("a proxy for a database fault");
        match fault {
            DbFault::Cut => proxy.cut(),
            DbFault::Stall => {
                proxy.set_mode(ProxyMode::Stall);
                wait_error_or_exit(process).await;
                proxy.set_mode(ProxyMode::Pass);
            }
            DbFault::Down => {
                proxy.go_down();
                wait_error_or_exit(process).await;
                proxy.come_up().await;
            }
            DbFault::DownUntilExit => {
                proxy.go_down();
                let _ = process.wait_exit(Duration::from_secs(120)).await;
                proxy.come_up().await;
            }
        }
    }

    async fn proxied_url(&mut self) -> String {
        if self.proxy.is_none() {
            self.proxy = Some(Proxy::for_postgres(&self.world.db.url).await);
        }
        self.proxy
            .as_ref()
            .map(|(_, via)| via.clone())
            .unwrap_or_default()
    }

    pub async fn last_run_id(&self) -> i64 {
        sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM job_runs")
            .fetch_one(self.world.pool())
            .await
            .expect("last run")
    }

    /// A killed holder's lock lasts until its TTL (Redis) or until
    /// PostgreSQL sees the session gone; a tick started before would only
    /// find it held.
    async fn wait_lock_free(&self) {
        let (backend, world) = (self.backend, self.world);
        common::wait_until("the lock is free", Duration::from_secs(30), || async move {
            !backend.is_held(world).await
        })
        .await;
    }
}

/// Waits until the process logs an error (the fault reached it) or exits.
async fn wait_error_or_exit(process: &mut Replica) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while process.is_running() && !process.log().contains("ERROR") {
        assert!(
            Instant::now() < deadline,
            "no error logged within a minute:\n{}",
            process.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `INVOICE_REMINDER__<name>` variables.
pub fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (format!("INVOICE_REMINDER__{k}"), (*v).to_owned()))
        .collect()
}

pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => "an unknown end".into(),
    }
}
