//! Rebuilds the crate when a migration is added: `sqlx::migrate!` embeds
//! `migrations/` at compile time, and without this a new file (not a changed
//! one) left the binary and the tests migrating to the previous list. The
//! build script sqlx recommends (`sqlx migrate build-script`).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
