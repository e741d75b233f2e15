//! The time zones both this PostgreSQL and the worker know: a row's
//! `timezone` is used only when it is one of them (`AT TIME ZONE` raises on
//! a name PostgreSQL does not know, and one source row must never fail a
//! statement); any other is the source problem `bad_timezone`. Recorded
//! once, when the source is first checked (`source::check` reads them);
//! until then, the worker's own names.

use std::collections::HashSet;
use std::sync::OnceLock;

/// The names, as a set and as the jsonb object `$zones` binds
/// (`{"Europe/Berlin": true, ...}`: `?` finds a name by binary search).
#[derive(Debug)]
struct Known {
    names: HashSet<String>,
    json: serde_json::Value,
}

static KNOWN: OnceLock<Known> = OnceLock::new();
static WORKERS: OnceLock<Known> = OnceLock::new();

impl Known {
    fn of(names: impl IntoIterator<Item = String>) -> Self {
        let names: HashSet<String> = names.into_iter().collect();
        let json = serde_json::Value::Object(
            names
                .iter()
                .map(|n| (n.clone(), serde_json::Value::Bool(true)))
                .collect(),
        );
        Self { names, json }
    }
}

fn known() -> &'static Known {
    KNOWN.get().unwrap_or_else(|| {
        WORKERS
            .get_or_init(|| Known::of(chrono_tz::TZ_VARIANTS.iter().map(|z| z.name().to_owned())))
    })
}

/// Whether `name` is a zone both know (exactly as written).
pub fn knows(name: &str) -> bool {
    known().names.contains(name) && name.parse::<chrono_tz::Tz>().is_ok()
}

/// The names both know, as the jsonb object statements bind as `$zones`.
pub fn json() -> &'static serde_json::Value {
    &known().json
}

/// Whether the database's zones were recorded ([`record`]).
pub fn recorded() -> bool {
    KNOWN.get().is_some()
}

/// Records the zones the database knows (`pg_timezone_names`), once per
/// process: from then on only the names both know are used.
pub fn record(theirs: impl IntoIterator<Item = String>) {
    let theirs: HashSet<String> = theirs.into_iter().collect();
    let both = chrono_tz::TZ_VARIANTS
        .iter()
        .map(|z| z.name().to_owned())
        .filter(|n| theirs.contains(n));
    let _ = KNOWN.set(Known::of(both));
}
