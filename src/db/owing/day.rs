//! The day the conditions of [`super`] are judged on, as named parameters:
//! the date and zone, the gap, the steps' due-date windows and the
//! late-payment pricing ([`OwingDay::params`]), built once per tick or
//! command.

use chrono::NaiveDate;

use crate::db::params::Params;
use crate::stages::Window;

/// What decides, besides each row's own columns, whether an invoice owes a
/// step today: the date, the zone, the gap and the steps' windows. Built
/// once per tick (or command) and bound by name into every statement that
/// composes the conditions above.
#[derive(Debug, Clone)]
pub struct OwingDay {
    /// The database's date in the customers' zone.
    pub date: NaiveDate,
    /// The customers' zone, for "claimed on which day".
    pub timezone: String,
    /// `reminders.min_days_between`.
    pub gap_days: i64,
    keys: Vec<String>,
    froms: Vec<Option<NaiveDate>>,
    tos: Vec<NaiveDate>,
    pricing: Pricing,
}

/// What [`priced!`] binds: the late-payment steps, the regime of a row
/// that names none, and the regimes whose rates lack today's half-year.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pricing {
    pub late_steps: Vec<String>,
    pub regime: String,
    pub waiting: Vec<String>,
}

impl Pricing {
    /// The pricing of `settings` on `date` (in the zone's days).
    pub fn of(settings: &crate::config::Settings, date: NaiveDate) -> Self {
        let l = &settings.late_payment;
        let waiting = crate::domain::Regime::ALL
            .into_iter()
            .filter(|r| {
                l.law(*r).is_some_and(|law| {
                    crate::late_payment::missing_today(&law, &l.rates, date).is_some()
                })
            })
            .map(|r| r.name().to_owned())
            .collect();
        Self {
            late_steps: settings.reminders.stages.late_payment_keys(),
            regime: l.regime.name().to_owned(),
            waiting,
        }
    }
}

impl OwingDay {
    pub fn new(date: NaiveDate, timezone: &str, min_days_between: u32, windows: &[Window]) -> Self {
        Self {
            date,
            timezone: timezone.to_owned(),
            gap_days: i64::from(min_days_between),
            keys: windows.iter().map(|w| w.step.key.to_string()).collect(),
            froms: windows.iter().map(|w| w.due_from).collect(),
            tos: windows.iter().map(|w| w.due_to).collect(),
            pricing: Pricing::default(),
        }
    }

    /// The same day, with the late-payment steps that wait today.
    pub fn pricing(mut self, pricing: Pricing) -> Self {
        self.pricing = pricing;
        self
    }

    /// The regimes whose late-payment steps wait today.
    pub fn waiting_regimes(&self) -> &[String] {
        &self.pricing.waiting
    }

    /// The conditions of `settings` on `date`.
    pub fn from_settings(settings: &crate::config::Settings, date: NaiveDate) -> Self {
        let r = &settings.reminders;
        Self::new(
            date,
            settings.customer_timezone().name(),
            r.min_days_between,
            &r.stages.windows(date),
        )
        .pricing(Pricing::of(settings, date))
    }

    /// The latest due date any step owes today; None without steps.
    pub fn due_by(&self) -> Option<NaiveDate> {
        self.tos.iter().max().copied()
    }

    /// `$today`, `$tz`, `$gap_days`, the windows (`$step_keys`,
    /// `$due_froms`, `$due_tos`) and the pricing (`$late_steps`, `$regime`,
    /// `$waiting_regimes`).
    pub fn params(&self) -> Params<'_> {
        Params::new()
            .with("today", &self.date)
            .with("tz", &self.timezone)
            .with("gap_days", &self.gap_days)
            .with("step_keys", &self.keys)
            .with("due_froms", &self.froms)
            .with("due_tos", &self.tos)
            .with("late_steps", &self.pricing.late_steps)
            .with("regime", &self.pricing.regime)
            .with("waiting_regimes", &self.pricing.waiting)
    }
}
