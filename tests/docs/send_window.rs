//! docs/send-window.md's first `[send_window]` example, loaded as written
//! (its `calendars_dir` pointed at an empty folder): weekdays from 09:00 to
//! 17:00 in Berlin, Berlin's holidays closed.

use chrono::{DateTime, Utc};
use invoice_reminder::domain::{SendWindow, WindowState};

use super::{ConfigSource, Settings, blocks};

fn open_at(window: &SendWindow, at: &str) -> bool {
    let at: DateTime<Utc> = at.parse().unwrap();
    matches!(window.state_at(at), WindowState::Open { .. })
}

#[test]
fn the_send_window_guides_example_opens_on_weekdays_in_berlin_but_not_on_berlins_holidays() {
    let example = blocks("docs/send-window.md", "toml")
        .into_iter()
        .find(|b| b.contains("[send_window]"))
        .expect("the guide's [send_window] example");
    let dir = std::env::temp_dir().join(format!("send-window-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.toml");
    let text = example.replace(
        "calendars_dir = \"calendars\"",
        &format!("calendars_dir = {:?}", dir.display().to_string()),
    );
    assert_ne!(text, example, "the example names calendars_dir");
    std::fs::write(&file, &text).unwrap();
    let settings = Settings::load(&ConfigSource {
        path: Some(file),
        env: Vec::new(),
    })
    .unwrap_or_else(|e| panic!("{e}\n{text}"));
    std::fs::remove_dir_all(&dir).ok();
    let window = settings.send_window();

    // Tuesday 9 March 2027: 09:00 in Berlin is 08:00 UTC, 17:00 is 16:00.
    assert!(!open_at(&window, "2027-03-09T07:59:00Z"));
    assert!(open_at(&window, "2027-03-09T08:00:00Z"));
    assert!(open_at(&window, "2027-03-09T15:59:00Z"));
    assert!(!open_at(&window, "2027-03-09T16:00:00Z"));
    // Saturday 6 March, and Monday 8 March: Women's Day, a holiday in
    // Berlin (DE-BE) only.
    assert!(!open_at(&window, "2027-03-06T10:00:00Z"));
    assert!(!open_at(&window, "2027-03-08T10:00:00Z"));
}
