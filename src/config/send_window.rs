//! `[send_window]`: the local days and hours in which mail may go to the
//! relay, the zone of the customers' day and the holidays that stay closed
//! (docs/send-window.md), from a built-in calendar or an `.ics` file of
//! `calendars_dir` (`calendars.rs`). A bad `days`, `hours`, `timezone`,
//! `calendar` or `calendars_dir` stops the start-up naming the key (and a
//! bad file, its line).

use std::path::PathBuf;
use std::sync::Arc;

use chrono_tz::Tz;
use serde::{Deserialize, Deserializer, de::Error as _};

use super::ConfigError;
use super::calendars::Calendars;
use super::types::string_like;
use crate::domain::{Days, Holidays, Hours, OpenDays, SendWindow};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendWindowSettings {
    /// `"Mon-Fri"`, `"Mon,Wed,Fri"`; every day by default.
    #[serde(deserialize_with = "days")]
    pub days: Days,
    /// `"09:00-17:00"`, local; `"00:00-24:00"` (all day) by default.
    #[serde(deserialize_with = "hours")]
    pub hours: Hours,
    /// The window's zone and the customers' day; None (`""`):
    /// `schedule.timezone`.
    #[serde(deserialize_with = "optional_timezone")]
    pub timezone: Option<Tz>,
    /// The holiday calendar (`DE-BY`, or an `.ics` file's name) whose
    /// days stay closed; `""`: no holidays. Resolved by
    /// [`SendWindowSettings::read_calendars`] into `holidays`.
    #[serde(deserialize_with = "super::types::string_like")]
    pub calendar: String,
    /// A folder of `<name>.ics` calendars; None (`""`): none.
    #[serde(deserialize_with = "super::types::optional_path")]
    pub calendars_dir: Option<PathBuf>,
    /// The calendars of `calendars_dir` (and the built-in ones).
    #[serde(skip)]
    pub calendars: Arc<Calendars>,
    /// `calendar`'s holidays.
    #[serde(skip)]
    pub holidays: Option<Arc<Holidays>>,
}

impl SendWindowSettings {
    /// The window, its zone resolved against `schedule`'s.
    pub fn window(&self, schedule: Tz) -> SendWindow {
        SendWindow {
            open: OpenDays::new(self.days, self.holidays.clone()),
            hours: self.hours,
            timezone: self.timezone.unwrap_or(schedule),
        }
    }

    /// `customer`'s window: on their own zone's clock, closed on their own
    /// calendar's holidays (a calendar no one knows: none), else the
    /// window's.
    pub fn window_of(&self, schedule: Tz, customer: &crate::domain::Customer) -> SendWindow {
        let calendar = customer
            .holiday_calendar
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty());
        let holidays = match calendar {
            Some(name) => self.calendars.get(name),
            None => self.holidays.clone(),
        };
        SendWindow {
            open: OpenDays::new(self.days, holidays),
            hours: self.hours,
            timezone: customer
                .timezone
                .unwrap_or_else(|| self.timezone.unwrap_or(schedule)),
        }
    }
}

impl SendWindowSettings {
    /// Reads `calendars_dir` and resolves `calendar` against it and the
    /// built-in calendars.
    pub(super) fn read_calendars(&mut self) -> Result<(), ConfigError> {
        if let Some(dir) = &self.calendars_dir {
            self.calendars = Arc::new(Calendars::read(dir)?);
        }
        let name = self.calendar.trim();
        if name.is_empty() {
            self.holidays = None;
            return Ok(());
        }
        self.holidays = Some(self.calendars.get(name).ok_or_else(|| {
            let files = self.calendars.file_names();
            let also = if files.is_empty() {
                String::new()
            } else {
                format!(", or a file of send_window.calendars_dir: {}", files.join(", "))
            };
            ConfigError::new(
                "send_window.calendar",
                format!(
                    "unknown calendar {name:?} (a built-in calendar: an ISO 3166 code such as \"DE\", or with its subdivision, \"DE-BY\", \"GB-SCT\"; the list: docs/send-window.md{also})"
                ),
            )
        })?);
        Ok(())
    }
}

fn days<'de, D: Deserializer<'de>>(de: D) -> Result<Days, D::Error> {
    Days::parse(&string_like(de)?).map_err(D::Error::custom)
}

fn hours<'de, D: Deserializer<'de>>(de: D) -> Result<Hours, D::Error> {
    Hours::parse(&string_like(de)?).map_err(D::Error::custom)
}

fn optional_timezone<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Tz>, D::Error> {
    let name = string_like(de)?;
    if name.trim().is_empty() {
        return Ok(None);
    }
    name.trim().parse().map(Some).map_err(|_| {
        D::Error::custom(format!(
            "unknown time zone {name:?} (use an IANA name such as \"Europe/Berlin\", or \"\" for schedule.timezone)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Settings;

    fn refused(key: &str, value: &str) -> String {
        Settings::load_with(&[(key, value)])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn bad_days_hours_or_zone_are_refused_naming_the_key() {
        for (key, value, named) in [
            ("SEND_WINDOW__DAYS", "Mon-Fry", "send_window.days"),
            ("SEND_WINDOW__DAYS", "", "send_window.days"),
            ("SEND_WINDOW__HOURS", "17:00-09:00", "send_window.hours"),
            ("SEND_WINDOW__HOURS", "9am-5pm", "send_window.hours"),
            (
                "SEND_WINDOW__TIMEZONE",
                "Mars/Olympus",
                "send_window.timezone",
            ),
        ] {
            let e = refused(key, value);
            assert!(e.contains(named), "{key}={value}: {e}");
        }
    }

    #[test]
    fn the_window_is_open_always_by_default_and_its_zone_is_the_schedules() {
        let s = Settings::load_with(&[("SCHEDULE__TIMEZONE", "Europe/Madrid")]).unwrap();
        let w = s.send_window.window(s.schedule.timezone);
        assert!(w.always_open());
        assert_eq!(w.timezone.name(), "Europe/Madrid");
        let s = Settings::load_with(&[
            ("SEND_WINDOW__TIMEZONE", "Pacific/Honolulu"),
            ("SEND_WINDOW__HOURS", "09:00-17:00"),
        ])
        .unwrap();
        let w = s.send_window.window(s.schedule.timezone);
        assert!(!w.always_open());
        assert_eq!(w.timezone.name(), "Pacific/Honolulu");
    }
}
