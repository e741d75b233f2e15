//! The operator console in a real browser: headless Chromium driven over
//! WebDriver (chromedriver) by fantoccini, against the real console
//! (served in-process by the library), a real database and a real SMTP
//! sink. Screenshots go to docs/console/*.png (docs/console.md shows them).
//!
//! Needs `chromium` and `chromium-driver` (scripts/test.sh installs them).

#[path = "../common/mod.rs"]
#[allow(unused_imports)]
mod common;

mod browser;
mod guards;
mod holds;
mod invoices;
mod letters;
mod overview;
mod pages;
mod preview;
mod problems;
mod search;
mod suppressions;
mod unknown;
