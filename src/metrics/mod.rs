//! Prometheus metrics of one process, exposed at `/metrics` when
//! `http.listen` is set (and kept, cheaply, when it is not).
//!
//! The names are a contract (alerts are written against them): every one
//! starts with `invoice_reminder_`, counters end in `_total`, durations are
//! in `_seconds`. The exposition is prometheus-client's OpenMetrics text,
//! never written by hand. Recording is a few atomic operations per tick and
//! one histogram observation per SMTP transaction.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::domain::Counts;

mod labels;

pub use labels::{
    ActionLabel, OnLabel, OutcomeLabel, ProblemLabel, RegimeLabel, ResultLabel, SignalLabel,
};

/// Lock renewals by result (`renewed`, `gone`, `stolen`, `error`, `expired`).
pub type RenewalCounter = Family<ResultLabel, Counter>;

/// The process's metrics. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    ticks: Family<OutcomeLabel, Counter>,
    reminders: Family<ResultLabel, Counter>,
    tick_duration: Histogram,
    smtp_duration: Histogram,
    lock_acquisitions: Family<ResultLabel, Counter>,
    lock_renewals: RenewalCounter,
    lock_held: Gauge,
    last_success: Gauge<f64, AtomicU64>,
    deferred_writes: Gauge,
    claim_skipped: Counter,
    source_problems: Family<ProblemLabel, Counter>,
    suppressed: Counter,
    webhook_requests: Family<OutcomeLabel, Counter>,
    payment_signals: Family<SignalLabel, Counter>,
    stripe_lookups: Family<OutcomeLabel, Counter>,
    send_waits: Family<OnLabel, Counter<f64, AtomicU64>>,
    http_listener_full: Family<ActionLabel, Counter>,
    smtp_accepted_rate: Gauge<f64, AtomicU64>,
    smtp_pace: Gauge<f64, AtomicU64>,
    smtp_refused: Counter,
    rates_out_of_date: Family<RegimeLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("invoice_reminder");
        let ticks = Family::<OutcomeLabel, Counter>::default();
        registry.register("ticks", "Ticks by how they ended", ticks.clone());
        let reminders = Family::<ResultLabel, Counter>::default();
        registry.register(
            "reminders",
            "Reminders by result: sent, failed (retried later), discarded, unknown, handed_back, superseded (a step the gap kept back past its window, recorded skipped), withheld (a pause or payment hold come after the claim stopped it, handed back unattempted)",
            reminders.clone(),
        );
        // 10 ms .. ~1.5 h
        let tick_duration = Histogram::new(exponential_buckets(0.01, 2.0, 20));
        registry.register_with_unit(
            "tick_duration",
            "Duration of ticks that took the lock",
            Unit::Seconds,
            tick_duration.clone(),
        );
        // 1 ms .. ~30 s
        let smtp_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register_with_unit(
            "smtp_transaction_duration",
            "Duration of one SMTP send (connection from the pool or new, MAIL, RCPT, DATA)",
            Unit::Seconds,
            smtp_duration.clone(),
        );
        let lock_acquisitions = Family::<ResultLabel, Counter>::default();
        registry.register(
            "lock_acquisitions",
            "Attempts to take the lock: acquired, held (by another replica), unknown, error",
            lock_acquisitions.clone(),
        );
        let lock_renewals = RenewalCounter::default();
        registry.register(
            "lock_renewals",
            "Watchdog renewals: renewed, gone, stolen, error, expired",
            lock_renewals.clone(),
        );
        let lock_held = Gauge::default();
        registry.register(
            "lock_held",
            "1 while this replica holds the lock",
            lock_held.clone(),
        );
        let last_success = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "last_success_timestamp_seconds",
            "Unix time of this replica's last tick that finished done",
            last_success.clone(),
        );
        let deferred_writes = Gauge::default();
        registry.register(
            "deferred_writes",
            "Result writes waiting for the database to come back",
            deferred_writes.clone(),
        );
        let claim_skipped = Counter::default();
        registry.register(
            "claim_skipped",
            "Owed invoices a claim skipped because another claim already had them (or they were paid)",
            claim_skipped.clone(),
        );
        let source_problems = Family::<ProblemLabel, Counter>::default();
        registry.register(
            "source_problems",
            "Source rows skipped because they cannot make a reminder, by problem: repeated_key, null_key, missing_field, bad_currency, bad_address, bad_amount, bad_due_date, unknown_late_payment_regime",
            source_problems.clone(),
        );
        let suppressed = Counter::default();
        registry.register(
            "suppressed",
            "Reminders not sent because every recipient is on the suppression list (recorded skipped)",
            suppressed.clone(),
        );
        let webhook_requests = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "webhook_requests",
            "Requests to POST /webhooks/bounces by outcome: accepted, ignored, unauthorized, stale, replayed, bad_request, too_large, error",
            webhook_requests.clone(),
        );
        let payment_signals = Family::<SignalLabel, Counter>::default();
        registry.register(
            "payment_signals",
            "Requests to POST /webhooks/stripe and /webhooks/payments by kind (paid, pending, disputed, lost, settled, failed, released, link, none) and outcome (stored, seen, older, learnt, unlinked, ignored, unauthorized, stale, bad_request, too_large, timeout, busy, error)",
            payment_signals.clone(),
        );
        let send_waits = Family::<OnLabel, Counter<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "send_wait",
            "What the senders of ticks waited on: marks, results and claims (a send slot free, no letter to take, while the marker wrote a mark, wrote results, or waited for claimed letters), and pacer, pool and relay (a letter waiting for its rate slot, a connection, the relay's replies; summed over letters in flight)",
            Unit::Seconds,
            send_waits.clone(),
        );
        let stripe_lookups = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "stripe_lookups",
            "Lookups at Stripe's API of the invoice a PaymentIntent or a Charge pays (payments.stripe_api_key) by outcome: linked, not_found, unauthorized, failed (after its retries), dropped (the queue was full)",
            stripe_lookups.clone(),
        );
        let http_listener_full = Family::<ActionLabel, Counter>::default();
        registry.register(
            "http_listener_full",
            "New connections that found an HTTP listener at http.max_connections: replaced (a stalled connection gave way) or waited (none had stalled)",
            http_listener_full.clone(),
        );
        let smtp_accepted_rate = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "smtp_accepted_per_second",
            "Messages a second the SMTP relay accepted between its last two throttles, as this replica measured it (the pacer holds a little below it)",
            smtp_accepted_rate.clone(),
        );
        let smtp_pace = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "smtp_pace_per_second",
            "Messages a second this replica's sends are paced at after its last tick (0: no limit); lower than smtp.max_per_second while the relay throttles",
            smtp_pace.clone(),
        );
        let smtp_refused = Counter::default();
        registry.register(
            "smtp_throttled",
            "Messages the SMTP relay refused as throttling (4.7.x, too much mail, too many connections; the pacer's probes included); none of them used an attempt",
            smtp_refused.clone(),
        );
        let rates_out_of_date = Family::<RegimeLabel, Gauge>::default();
        registry.register(
            "late_payment_rates_out_of_date",
            "1 while a regime's late-payment stages wait because the rates file has no rate for today's half-year",
            rates_out_of_date.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                ticks,
                reminders,
                tick_duration,
                smtp_duration,
                lock_acquisitions,
                lock_renewals,
                lock_held,
                last_success,
                deferred_writes,
                claim_skipped,
                source_problems,
                suppressed,
                webhook_requests,
                payment_signals,
                stripe_lookups,
                send_waits,
                http_listener_full,
                smtp_accepted_rate,
                smtp_pace,
                smtp_refused,
                rates_out_of_date,
            }),
        }
    }
}

impl Metrics {
    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry)?;
        Ok(out)
    }

    /// One tick ended with `outcome` (`done`, `lock_held`, ..., `error`).
    pub fn tick_ended(&self, outcome: &'static str) {
        self.inner
            .ticks
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// A tick that worked (under the lock or without one) recorded its run.
    pub fn tick_worked(&self, counts: &Counts, took: Duration, done: bool) {
        let m = &self.inner;
        for (result, n) in [
            ("sent", counts.sent),
            ("failed", counts.failed),
            ("discarded", counts.discarded),
            ("unknown", counts.unknown),
            ("handed_back", counts.handed_back),
            ("superseded", counts.superseded),
            ("withheld", counts.withheld),
        ] {
            m.reminders
                .get_or_create(&ResultLabel { result })
                .inc_by(u64::from(n));
        }
        m.claim_skipped.inc_by(u64::from(counts.skipped));
        m.suppressed.inc_by(u64::from(counts.suppressed));
        if done {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            m.last_success.set(now.as_secs_f64());
        }
        // Last: a scraper that sees this tick counted sees its counts too.
        m.tick_duration.observe(took.as_secs_f64());
    }

    /// The relay accepted `per_second` between its last two throttles.
    pub fn smtp_accepted(&self, per_second: f64) {
        self.inner.smtp_accepted_rate.set(per_second);
    }

    /// The relay refused `n` messages as throttling.
    pub fn smtp_refused(&self, n: u64) {
        self.inner.smtp_refused.inc_by(n);
    }

    /// The rate sends are paced at (None: no limit).
    pub fn smtp_pace(&self, per_second: Option<f64>) {
        self.inner.smtp_pace.set(per_second.unwrap_or(0.0));
    }

    /// A tick skipped `n` source rows for `problem`.
    /// Which regimes' late-payment stages wait today (each regime 1 or 0).
    pub fn rates_out_of_date(&self, waiting: &[String]) {
        for regime in crate::domain::Regime::ALL {
            let waits = waiting.iter().any(|w| w == regime.name());
            let gauge = self.inner.rates_out_of_date.get_or_create(&RegimeLabel {
                regime: regime.name(),
            });
            gauge.set(i64::from(waits));
        }
    }

    pub fn source_problems(&self, problem: &'static str, n: u32) {
        self.inner
            .source_problems
            .get_or_create(&ProblemLabel { problem })
            .inc_by(u64::from(n));
    }

    /// One request to the bounce webhook ended with `outcome`.
    /// One request to a payment signal route: the signal's kind (`none`
    /// when it was not read) and how it ended.
    pub fn payment_signal(&self, kind: &'static str, outcome: &'static str) {
        self.inner
            .payment_signals
            .get_or_create(&SignalLabel { kind, outcome })
            .inc();
    }

    /// What a tick's senders waited on.
    pub fn send_waits(&self, waits: &crate::domain::Waits) {
        for (on, ms) in [
            ("marks", waits.marks),
            ("results", waits.results),
            ("claims", waits.claims),
            ("pacer", waits.pacer),
            ("pool", waits.pool),
            ("relay", waits.relay),
            ("idle_connections", waits.idle_connections),
        ] {
            // Milliseconds as seconds: exact enough for a counter of waits.
            #[allow(clippy::cast_precision_loss)]
            let seconds = ms as f64 / 1000.0;
            self.inner
                .send_waits
                .get_or_create(&OnLabel { on })
                .inc_by(seconds);
        }
    }

    /// A lookup at Stripe's API ended as `outcome`.
    pub fn stripe_lookup(&self, outcome: &'static str) {
        self.inner
            .stripe_lookups
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    pub fn webhook_request(&self, outcome: &'static str) {
        self.inner
            .webhook_requests
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// A new connection found an HTTP listener at `http.max_connections`.
    pub fn http_listener_full(&self, action: &'static str) {
        self.inner
            .http_listener_full
            .get_or_create(&ActionLabel { action })
            .inc();
    }

    pub fn lock_acquisition(&self, result: &'static str) {
        self.inner
            .lock_acquisitions
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn set_lock_held(&self, held: bool) {
        self.inner.lock_held.set(i64::from(held));
    }

    pub fn set_deferred_writes(&self, n: usize) {
        self.inner
            .deferred_writes
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Handed to the lock's watchdog.
    pub fn lock_renewals(&self) -> RenewalCounter {
        self.inner.lock_renewals.clone()
    }

    /// Handed to the mailer.
    pub fn smtp_duration(&self) -> Histogram {
        self.inner.smtp_duration.clone()
    }
}

#[cfg(test)]
mod tests;
