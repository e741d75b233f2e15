//! The day the conditions of [`super`] are judged on, as named parameters:
//! the date and zone, the gap, the steps' due-date windows and the
//! late-payment pricing ([`OwingDay::params`]), built once per tick or
//! command.

use chrono::{DateTime, NaiveDate, Utc};

use crate::db::params::Params;
use crate::stages::{LocalWindow, LocalWindows, Window, local_days};

/// What decides, besides each row's own columns, whether an invoice owes a
/// step today: the instant, the zone of rows without one, the gap, the
/// steps' windows in every local date and calendar group, and the send
/// window. Built once per tick (or command) and bound by name into every
/// statement that composes the conditions above.
#[derive(Debug, Clone)]
pub struct OwingDay {
    /// The database's date in the zone of rows without one.
    pub date: NaiveDate,
    /// The instant the day is judged at (the database clock's): each row's
    /// date is this instant's in its own zone.
    pub now: DateTime<Utc>,
    /// The zone of rows without one (`send_window.timezone`, else
    /// `schedule.timezone`).
    pub timezone: String,
    /// `reminders.min_days_between`.
    pub gap_days: i64,
    keys: Vec<String>,
    froms: Vec<Option<NaiveDate>>,
    tos: Vec<NaiveDate>,
    days: Vec<NaiveDate>,
    groups: Vec<String>,
    /// Each step's due dates on any local date, for the scans.
    scans: Vec<Window>,
    scan_keys: Vec<String>,
    scan_froms: Vec<Option<NaiveDate>>,
    scan_tos: Vec<NaiveDate>,
    /// Per scan, the due dates that owe its step on every local date and
    /// in every group (`LocalWindows::sure`); no end: none.
    sure_froms: Vec<Option<NaiveDate>>,
    sure_tos: Vec<Option<NaiveDate>>,
    local: Local,
    pricing: Pricing,
}

/// What [`in_send_window!`] and the calendar groups bind.
#[derive(Debug, Clone)]
struct Local {
    /// The calendar of rows without one (upper case; `""`: none).
    calendar: String,
    /// `{"DE-BY": "DE-BY", "AT": "DE-BY"}`: calendars whose business days
    /// differ from none's, by group.
    groups: serde_json::Value,
    /// `{"DE-BY 2027-01-06": true}`: the holidays among the local dates.
    closed: serde_json::Value,
    /// ISO days of the week (1 Monday) the window is open.
    open_days: Vec<i32>,
    /// Minutes after local midnight: open from (inside) to (outside).
    open_from: i32,
    open_to: i32,
}

impl Default for Local {
    fn default() -> Self {
        Self {
            calendar: String::new(),
            groups: serde_json::json!({}),
            closed: serde_json::json!({}),
            open_days: (1..=7).collect(),
            open_from: 0,
            open_to: 1440,
        }
    }
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
    /// One zone, one calendar-free window set, for a day whose instant is
    /// its noon in UTC: what a test or a tool claiming given `windows`
    /// needs.
    pub fn new(date: NaiveDate, timezone: &str, min_days_between: u32, windows: &[Window]) -> Self {
        let now = date
            .and_hms_opt(12, 0, 0)
            .map(|t| t.and_utc())
            .unwrap_or_default();
        let local = windows
            .iter()
            .map(|w| LocalWindow {
                day: date,
                group: String::new(),
                window: w.clone(),
            })
            .collect::<Vec<_>>();
        let sure: Vec<Option<Window>> = windows.iter().cloned().map(Some).collect();
        Self::of(
            date,
            now,
            timezone,
            min_days_between,
            &local,
            windows.to_vec(),
            &sure,
        )
    }

    fn of(
        date: NaiveDate,
        now: DateTime<Utc>,
        timezone: &str,
        min_days_between: u32,
        windows: &[LocalWindow],
        scans: Vec<Window>,
        sure: &[Option<Window>],
    ) -> Self {
        Self {
            date,
            now,
            timezone: timezone.to_owned(),
            gap_days: i64::from(min_days_between),
            keys: windows
                .iter()
                .map(|w| w.window.step.key.to_string())
                .collect(),
            froms: windows.iter().map(|w| w.window.due_from).collect(),
            tos: windows.iter().map(|w| w.window.due_to).collect(),
            days: windows.iter().map(|w| w.day).collect(),
            groups: windows.iter().map(|w| w.group.clone()).collect(),
            scan_keys: scans.iter().map(|w| w.step.key.to_string()).collect(),
            scan_froms: scans.iter().map(|w| w.due_from).collect(),
            scan_tos: scans.iter().map(|w| w.due_to).collect(),
            sure_froms: sure
                .iter()
                .map(|w| w.as_ref().and_then(|w| w.due_from))
                .collect(),
            sure_tos: sure.iter().map(|w| w.as_ref().map(|w| w.due_to)).collect(),
            scans,
            local: Local::default(),
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

    /// The conditions of `settings` at `now`, whose date in the zone of
    /// rows without one is `date`.
    pub fn from_settings(
        settings: &crate::config::Settings,
        now: DateTime<Utc>,
        date: NaiveDate,
    ) -> Self {
        let r = &settings.reminders;
        let w = &settings.send_window;
        let local = LocalWindows::new(&r.stages, w.days, w.calendars.all(), now);
        let sure = local.sure();
        let mut day = Self::of(
            date,
            now,
            settings.customer_timezone().name(),
            r.min_days_between,
            &local.windows,
            local.scans,
            &sure,
        )
        .pricing(Pricing::of(settings, date));
        let closed: serde_json::Map<String, serde_json::Value> = w
            .calendars
            .all()
            .flat_map(|(name, h)| {
                local_days(now)
                    .into_iter()
                    .filter(|d| h.contains(*d))
                    .map(move |d| (format!("{name} {d}"), serde_json::Value::Bool(true)))
            })
            .collect();
        let (open_from, open_to) = w.hours.minutes();
        day.local = Local {
            calendar: w.calendar.trim().to_ascii_uppercase(),
            groups: serde_json::json!(local.groups),
            closed: serde_json::Value::Object(closed),
            open_days: w.days.iso_weekdays(),
            open_from: i32::from(open_from),
            open_to: i32::from(open_to),
        };
        day
    }

    /// Each step's due dates on any local date today, oldest first: the
    /// ranges the scans walk.
    pub fn scans(&self) -> &[Window] {
        &self.scans
    }

    /// The latest due date any step owes today; None without steps.
    pub fn due_by(&self) -> Option<NaiveDate> {
        self.tos.iter().max().copied()
    }

    /// `$today`, `$now`, `$tz`, `$gap_days`, the windows (`$step_keys`,
    /// `$due_froms`, `$due_tos`, `$step_days`, `$step_groups`) and their
    /// union per step (`$scan_keys`, `$scan_froms`, `$scan_tos`, and the
    /// part of it every date agrees on: `$sure_froms`, `$sure_tos`), the
    /// calendars (`$calendar`, `$groups`, `$closed`), the send window
    /// (`$open_days`, `$open_from`, `$open_to`) and the pricing
    /// (`$late_steps`, `$regime`, `$waiting_regimes`).
    pub fn params(&self) -> Params<'_> {
        Params::new()
            .with("today", &self.date)
            .with("now", &self.now)
            .with("tz", &self.timezone)
            .with("step_days", &self.days)
            .with("step_groups", &self.groups)
            .with("calendar", &self.local.calendar)
            .with("groups", &self.local.groups)
            .with("closed", &self.local.closed)
            .with("open_days", &self.local.open_days)
            .with("open_from", &self.local.open_from)
            .with("open_to", &self.local.open_to)
            .with("gap_days", &self.gap_days)
            .with("step_keys", &self.keys)
            .with("due_froms", &self.froms)
            .with("due_tos", &self.tos)
            .with("scan_keys", &self.scan_keys)
            .with("scan_froms", &self.scan_froms)
            .with("scan_tos", &self.scan_tos)
            .with("sure_froms", &self.sure_froms)
            .with("sure_tos", &self.sure_tos)
            .with("late_steps", &self.pricing.late_steps)
            .with("regime", &self.pricing.regime)
            .with("waiting_regimes", &self.pricing.waiting)
    }
}
