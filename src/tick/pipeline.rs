//! What the four phases of a tick share ([`Pipeline`]): the run, the stop
//! signals, the counts, the source problems met, the claim bound and the
//! run's lease in the database. The phases (`claim/`, `mark.rs`,
//! `send.rs`, `record.rs`) sit above this file; `phases.rs` wires them
//! together.
//!
//! Guarantees: before every mail the lease, the shutdown signal, the SMTP
//! server and the database's acceptance of our writes are checked
//! ([`Pipeline::stop_reason`]); at most `2 × batch_size` rows (and the
//! rows of the letters the in-flight limit holds) are claimed but not yet
//! recorded at any moment ([`ClaimBound`]), and of those at most
//! `send_concurrency` letters are marked started and not yet written to
//! a connection (`InFlight`): a SIGKILL leaves unknown only those and
//! the mail the server took whose result was not yet written; later ticks
//! hand back the rest. Rows marked and not handed to the server are kept in [`Unsent`]
//! and handed back at the end of the run, whatever ends it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use chrono::{DateTime, NaiveDate, Utc};

use crate::domain::{SendWindow, WindowState};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::bounds::ClaimBound;
use super::context::Context;
use super::hold_checks::HoldChecks;
use super::timings::Timings;
use super::unsent::Unsent;
use crate::db;
use crate::db::locks::Fence;
use crate::domain::{Counts, Letter, SourceProblem};
use crate::lock::{LeaseGuard, LostReason};
use crate::problems::Tally;

/// Why a tick stopped starting new mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Lost(LostReason),
    Shutdown,
    /// No connection to the SMTP server could be made.
    SmtpDown,
    /// The SMTP server refused our login: a configuration problem.
    SmtpAuth,
    /// The SMTP relay throttles us: no more mail this tick, the next one
    /// sends slower (`mail::pace`).
    Throttled,
    /// Results could not be written: sending more would pile up rows whose
    /// fate only this process knows.
    RecordFailed,
    /// The send window closed: no more mail goes to the relay this tick.
    WindowClosed,
}

/// Stops raised by the phases themselves (the lease and shutdown have their
/// own signals); the first one wins.
const NO_STOP: u8 = 0;
const SMTP_DOWN: u8 = 1;
const SMTP_AUTH: u8 = 2;
const RECORD_FAILED: u8 = 3;
const THROTTLED: u8 = 4;

/// The fencing token a tick's claims present, owned (see [`Fence`]).
#[derive(Debug, Clone)]
struct OwnedFence {
    lock_key: String,
    token: i64,
    holder: uuid::Uuid,
}

/// The run one tick works, and what its phases share. The phases run as
/// tasks of their own (so a busy sender never delays a mark's reply), each
/// holding an `Arc` of this.
pub(super) struct Pipeline {
    ctx: Context,
    /// Presented with every claim; None without a lock.
    fence: Option<OwnedFence>,
    guard: LeaseGuard,
    shutdown: CancellationToken,
    /// Cancelled by the first phase stop ([`Pipeline::stop`]).
    halted: CancellationToken,
    /// The database's date: the due steps and "days overdue" follow it.
    today: NaiveDate,
    /// The database clock when the tick began: each customer's own date
    /// and send window are decided at it.
    now: DateTime<Utc>,
    /// This process's clock at that instant.
    began: Instant,
    run_id: i64,
    /// `job_runs.run_date`: `today` as text.
    run_date: String,
    stopped: AtomicU8,
    counts: Mutex<Counts>,
    problems: Mutex<Tally>,
    bound: ClaimBound,
    timings: Timings,
    /// Rows marked started and not handed to the server: returned at the
    /// end of the run, whatever ends it.
    unsent: Unsent,
    /// The reads of the holds for letters that waited before they go.
    hold_checks: HoldChecks,
    /// When the send window closes; None: not this tick.
    closes: Option<Instant>,
    /// A letter went back because its customer's own window closed.
    window_handed_back: std::sync::atomic::AtomicBool,
}

impl Pipeline {
    pub fn new(
        ctx: &Context,
        fence: Option<Fence<'_>>,
        guard: &LeaseGuard,
        shutdown: &CancellationToken,
        (now, today): (DateTime<Utc>, NaiveDate),
        run_id: i64,
        rows_per_letter: usize,
    ) -> Self {
        let began = Instant::now();
        Self {
            ctx: ctx.clone(),
            fence: fence.map(|f| OwnedFence {
                lock_key: f.lock_key.to_owned(),
                token: f.token,
                holder: f.holder,
            }),
            guard: guard.clone(),
            shutdown: shutdown.clone(),
            halted: CancellationToken::new(),
            today,
            now,
            began,
            run_id,
            run_date: today.to_string(),
            stopped: AtomicU8::new(NO_STOP),
            counts: Mutex::default(),
            problems: Mutex::default(),
            bound: ClaimBound::for_settings(&ctx.settings.reminders, rows_per_letter),
            timings: Timings::since(began),
            unsent: Unsent::default(),
            hold_checks: HoldChecks::default(),
            closes: None,
            window_handed_back: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The same pipeline, stopping when the send window closes at `closes`.
    pub fn closing_at(mut self, closes: Option<Instant>) -> Self {
        self.closes = closes;
        self
    }

    pub fn ctx(&self) -> &Context {
        &self.ctx
    }

    pub fn fence(&self) -> Option<Fence<'_>> {
        self.fence.as_ref().map(|f| Fence {
            lock_key: &f.lock_key,
            token: f.token,
            holder: f.holder,
        })
    }

    pub fn today(&self) -> NaiveDate {
        self.today
    }

    /// `customer`'s own send window, when rows name their own zone or
    /// calendar and it is not open always (otherwise the tick stops at the
    /// window's close, [`Stop::WindowClosed`]).
    pub fn window_of(&self, customer: &crate::domain::Customer) -> Option<SendWindow> {
        if !self.ctx.db.names().local_columns() {
            return None;
        }
        let settings = &self.ctx.settings;
        let window = settings
            .send_window
            .window_of(settings.schedule.timezone, customer);
        (!window.always_open()).then_some(window)
    }

    /// Whether `window` is closed now; a letter found so goes back.
    pub fn window_closed(&self, window: &SendWindow) -> bool {
        let closed = matches!(window.state_at(self.clock()), WindowState::Closed { .. });
        if closed {
            self.window_handed_back.store(true, Ordering::SeqCst);
        }
        closed
    }

    /// Whether a letter went back because its customer's window closed.
    pub fn closed_windows(&self) -> bool {
        self.window_handed_back.load(Ordering::SeqCst)
    }

    /// The database clock when the tick began.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// The database clock now, as the tick's start and this process's
    /// elapsed time give it.
    pub fn clock(&self) -> DateTime<Utc> {
        chrono::TimeDelta::from_std(self.began.elapsed())
            .ok()
            .and_then(|d| self.now.checked_add_signed(d))
            .unwrap_or(self.now)
    }

    pub fn run_id(&self) -> i64 {
        self.run_id
    }

    pub fn run_date(&self) -> &str {
        &self.run_date
    }

    /// Rows claimed and not yet recorded.
    pub fn bound(&self) -> &ClaimBound {
        &self.bound
    }

    /// Where the phases spent their time (a diagnostic).
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    pub fn stop_reason(&self) -> Option<Stop> {
        if let Err(reason) = self.guard.check() {
            return Some(Stop::Lost(reason));
        }
        if self.shutdown.is_cancelled() {
            return Some(Stop::Shutdown);
        }
        if self.closes.is_some_and(|at| Instant::now() >= at) {
            return Some(Stop::WindowClosed);
        }
        match self.stopped.load(Ordering::SeqCst) {
            SMTP_DOWN => Some(Stop::SmtpDown),
            SMTP_AUTH => Some(Stop::SmtpAuth),
            RECORD_FAILED => Some(Stop::RecordFailed),
            THROTTLED => Some(Stop::Throttled),
            _ => None,
        }
    }

    /// Stops the tick for `stop`; true if it is the first phase stop.
    pub fn stop(&self, stop: Stop) -> bool {
        let code = match stop {
            Stop::SmtpDown => SMTP_DOWN,
            Stop::SmtpAuth => SMTP_AUTH,
            Stop::RecordFailed => RECORD_FAILED,
            Stop::Throttled => THROTTLED,
            Stop::Lost(_) | Stop::Shutdown | Stop::WindowClosed => return false,
        };
        let first = self
            .stopped
            .compare_exchange(NO_STOP, code, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        self.halted.cancel();
        first
    }

    /// Resolves once the tick has a stop reason: shutdown, the lease lost
    /// or expired, or a phase stop. What waits for a send's slot waits on
    /// this too.
    pub async fn stopped(&self) {
        while self.stop_reason().is_none() {
            let expires = self.guard.valid_until();
            tokio::select! {
                () = self.shutdown.cancelled() => {}
                () = self.guard.lost() => {}
                () = self.halted.cancelled() => {}
                () = async {
                    match expires {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {}
                () = async {
                    match self.closes {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }

    /// The claim saw that a newer lock holder has written.
    pub fn lose(&self, reason: LostReason) {
        self.guard.lose(reason);
    }

    /// What the phases did so far, with the source problems met.
    pub fn counts(&self) -> Counts {
        let mut counts = *self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.source_problems = self.problems().total();
        counts
    }

    pub fn add(&self, more: &Counts) {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(more);
    }

    /// A source row was skipped for `problem`.
    pub fn problem(&self, problem: SourceProblem) {
        tracing::debug!(%problem, "source row skipped");
        self.problems().add(problem);
    }

    /// The source problems met so far.
    pub fn problems(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.problems.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rows marked started and not handed to the server.
    pub fn unsent(&self) -> &Unsent {
        &self.unsent
    }

    /// The reads of the holds before a letter that waited goes.
    pub fn hold_checks(&self) -> &HoldChecks {
        &self.hold_checks
    }

    /// `letter` was marked but its mail will not go out this run: its rows
    /// are handed back at the end of the run, and their room in the claim
    /// bound freed.
    pub fn not_sent(&self, letter: &Letter) {
        self.unsent.add([letter]);
        self.bound.release(letter.rows.len());
    }

    /// Extends `job_runs.lease_until` every renewal interval while the lease
    /// is trusted; never returns.
    pub async fn keep_lease(&self) -> std::convert::Infallible {
        let lock = &self.ctx.settings.lock;
        loop {
            tokio::time::sleep(lock.renew_every).await;
            if self.guard.check().is_ok()
                && let Err(e) =
                    db::runs::extend_leases(&self.ctx.db, &[self.run_id], lock.ttl).await
            {
                tracing::debug!(error = %e, "could not extend the run's lease in the database");
            }
        }
    }
}
