//! `send_window.calendars_dir`: a folder of `<name>.ics` files, each a
//! holiday calendar named by its file (`acme-closures.ics` is
//! `acme-closures`); a file named like a built-in calendar (`DE-BY.ics`)
//! adds its days to it. Read once at start-up; a folder that is not one,
//! or a file that does not parse, stops the start-up naming the key, the
//! file and its line. Names are matched without regard to case.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ConfigError;
use super::ics;
use crate::domain::Holidays;

const KEY: &str = "send_window.calendars_dir";

/// The calendars a name can refer to: the files of `calendars_dir`, then
/// the built-in ones.
#[derive(Debug, Clone, Default)]
pub struct Calendars {
    /// The files' calendars, by upper-cased name.
    files: HashMap<String, Arc<Holidays>>,
}

impl Calendars {
    /// Reads every `.ics` file of `dir` (other files and folders in it are
    /// left alone).
    pub fn read(dir: &Path) -> Result<Self, ConfigError> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            let reason = if dir.exists() && !dir.is_dir() {
                format!("{} is not a folder", dir.display())
            } else {
                format!("cannot read the folder {}: {e}", dir.display())
            };
            ConfigError::new(KEY, reason)
        })?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x.eq_ignore_ascii_case("ics")))
            .collect();
        paths.sort();
        let mut files = HashMap::new();
        for path in paths {
            let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::trim) else {
                continue;
            };
            if name.is_empty() {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|e| {
                ConfigError::new(KEY, format!("cannot read {}: {e}", path.display()))
            })?;
            let days = ics::holidays(&text)
                .map_err(|e| ConfigError::new(KEY, format!("{}: {e}", path.display())))?;
            let calendar = match Holidays::built_in(name) {
                Some(built_in) => built_in.with_days(days),
                None => Holidays::of_days(name, days),
            };
            files.insert(name.to_ascii_uppercase(), Arc::new(calendar));
        }
        Ok(Self { files })
    }

    /// The calendar `name`: a file's (with a built-in one's days when it is
    /// named like one), else the built-in one; None: neither.
    pub fn get(&self, name: &str) -> Option<Arc<Holidays>> {
        let wanted = name.trim().to_ascii_uppercase();
        self.files
            .get(&wanted)
            .cloned()
            .or_else(|| Holidays::all_built_in().get(&wanted).cloned())
    }

    /// Every calendar a name can refer to, by upper-cased name: the
    /// built-in ones and the files' (a file wins over a built-in one of its
    /// name).
    pub fn all(&self) -> impl Iterator<Item = (&str, &Arc<Holidays>)> {
        Holidays::all_built_in()
            .iter()
            .filter(|(name, _)| !self.files.contains_key(*name))
            .chain(self.files.iter())
            .map(|(name, h)| (name.as_str(), h))
    }

    /// The files' calendar names, sorted.
    pub fn file_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.files.values().map(|h| h.name()).collect();
        names.sort_unstable();
        names
    }
}
