//! The operator console: the billing team's page over what the CLI knows
//! (`status`, `audit`, `settle`, `suppress`), served by `invoice-reminder
//! console` as a process of its own (docs/console.md).
//!
//! Guarantees:
//! * It starts only with at least one `[[console.users]]` (exit 2).
//! * Every page but `/login` needs a live session (stored in PostgreSQL,
//!   so it survives a restart and works across replicas); every POST is
//!   gated once, in [`gate::gate`]: an editor's, with its session's
//!   CSRF token, or refused 403 with nothing changed.
//! * Every question and change goes through the operator's desk
//!   (`operator::desk`), the one door to the database the command line
//!   uses too: a page formats what it answers. Every change is written in
//!   one transaction with its activity record (`db::activity`).
//! * HTML is server-rendered from autoescaped templates, with a CSP that
//!   allows no inline script; no page needs JavaScript.
//! * The listener is the worker's (`http::listener`): connection cap and
//!   header timeout from `[http]`; bodies are read within
//!   `http.body_read_timeout`.

mod activity;
mod auth;
mod chart;
mod failure;
mod gate;
mod invoices;
mod kept;
mod login;
mod messages;
mod overview;
mod pages;
mod pause;
mod preview;
mod problems;
mod search;
mod session;
mod suppressions;
mod unknown;

pub use auth::hash as password_phc;

use std::io::Read as _;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::db::Db;
use crate::http::listener::{self, Limits};
use crate::metrics::Metrics;
use crate::operator::UsageError;
use crate::operator::desk::Desk;

/// The largest request body read (a form is far smaller).
const MAX_BODY: usize = 64 * 1024;

/// What every handler shares.
#[derive(Clone)]
pub struct App {
    inner: Arc<Inner>,
}

pub struct Inner {
    pub settings: Arc<Settings>,
    /// The database, reached only through a [`Desk`] (`App::desk`).
    db: Db,
    pub templates: minijinja::Environment<'static>,
    pub throttle: auth::Throttle,
    /// Mark the cookie `Secure`: the console listens beyond loopback.
    pub secure_cookie: bool,
    /// The workers' lock, read (never taken) to show who holds it.
    pub lock: crate::lock::LockBackend,
    /// What the overview read last of what grows with the data.
    pub kept: kept::Keeper,
    /// Money and dates as the mails write them.
    pub formats: crate::mail::format::Formats,
}

impl std::ops::Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl App {
    /// A desk for one request: every question and change goes through it.
    pub fn desk(&self) -> Desk {
        Desk::new(self.db.clone(), Arc::clone(&self.settings))
    }

    /// `path` under `console.base_path`.
    pub fn path(&self, path: &str) -> String {
        format!("{}{path}", self.settings.console.base_path)
    }
}

/// `invoice-reminder console [hash-password]`.
pub async fn run(settings: Settings) -> anyhow::Result<ExitCode> {
    check_users(&settings)?;
    let addr = settings.console.listen;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("failed to listen on {addr} (console.listen)"))?;
    let pool = crate::db::connect(&settings)
        .await
        .context("failed to connect to PostgreSQL")?;
    let db = Db::new(pool, &settings);
    let stop = crate::shutdown::listen();
    tracing::info!(%addr, "the console is listening");
    serve(settings, db, listener, stop).await?;
    Ok(ExitCode::SUCCESS)
}

/// Refuses to start without a user: a console no one can sign in to is a
/// configuration mistake.
pub fn check_users(settings: &Settings) -> Result<(), UsageError> {
    if settings.console.users.is_empty() {
        return Err(UsageError(
            "console.users is empty: add a [[console.users]] table with name, password_hash (from `invoice-reminder console hash-password`) and role (\"viewer\" or \"editor\") to the configuration file".into(),
        ));
    }
    Ok(())
}

/// Serves the console on `listener` until `stop` (tests call this).
pub async fn serve(
    settings: Settings,
    db: Db,
    listener: TcpListener,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let secure_cookie = !listener
        .local_addr()
        .context("failed to read the console's address")?
        .ip()
        .is_loopback();
    let limits = Limits::from_settings(&settings.http);
    let app = App {
        inner: Arc::new(Inner {
            templates: pages::environment().context("failed to load the console's templates")?,
            throttle: auth::Throttle::default(),
            secure_cookie,
            lock: crate::lock::LockBackend::from_settings(&settings, Default::default())
                .context("failed to set up reading the lock")?,
            kept: kept::Keeper::default(),
            formats: crate::mail::format::Formats::default(),
            settings: Arc::new(settings),
            db,
        }),
    };
    listener::serve(listener, router(app), limits, Metrics::default(), stop).await;
    Ok(())
}

fn router(app: App) -> Router {
    let signed_in = Router::new()
        .route("/", get(overview::overview))
        .route("/unknown", get(unknown::list))
        .route("/unknown/settle", post(unknown::settle))
        // The address the console's forms posted to before it was "settle".
        .route("/unknown/resolve", post(unknown::settle))
        .route("/activity", get(activity::activity))
        .route("/problems", get(problems::list))
        .route("/preview", get(preview::list))
        .route("/preview/frame", get(preview::frame))
        .route(
            "/suppressions",
            get(suppressions::list).post(suppressions::add),
        )
        .route("/suppressions/remove", post(suppressions::remove))
        .route("/invoices/{id}", get(invoices::invoice))
        .route(
            "/invoices/{id}/messages/{message_id}",
            get(messages::message_html),
        )
        .route(
            "/invoices/{id}/messages/{message_id}/raw",
            get(messages::message_raw),
        )
        .route(
            "/invoices/{id}/messages/{message_id}/letters/{name}",
            get(messages::letter),
        )
        .route("/invoices/{id}/pause", post(pause::post))
        .route("/invoices/{id}/unpause", post(pause::post))
        .route("/invoices/{id}/lift", post(pause::lift))
        .route("/customers/{id}", get(invoices::customer))
        .route("/customers/{id}/pause", post(pause::post))
        .route("/customers/{id}/unpause", post(pause::post))
        .route("/search", get(search::search))
        .route("/logout", post(login::logout))
        .route_layer(from_fn_with_state(app.clone(), gate::gate));
    let routes = Router::new()
        .route("/login", get(login::form).post(login::login))
        .route("/static/console.css", get(pages::stylesheet))
        .merge(signed_in)
        .layer(from_fn_with_state(app.clone(), pages::guard));
    let base = app.settings.console.base_path.clone();
    let routes = routes.with_state(app);
    if base.is_empty() {
        return routes;
    }
    // Nested, the overview answers at `{base}` only; `{base}/` is where a
    // reverse proxy and our own redirects send people, so it is read as
    // `{base}` before routing.
    let nested = Router::new().nest(&base, routes);
    let slash = format!("{base}/");
    Router::new().fallback_service(tower::ServiceExt::map_request(
        nested,
        move |mut request: axum::extract::Request| {
            if request.uri().path() == slash {
                let query = request
                    .uri()
                    .query()
                    .map_or_else(String::new, |q| format!("?{q}"));
                if let Ok(uri) = format!("{base}{query}").parse() {
                    *request.uri_mut() = uri;
                }
            }
            request
        },
    ))
}

/// Reads a password on stdin (one line; the newline is dropped) and prints
/// its argon2id PHC string for `[[console.users]] password_hash`.
pub fn hash_password() -> anyhow::Result<ExitCode> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .context("failed to read the password from stdin")?;
    let password = input.strip_suffix('\n').unwrap_or(&input);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() {
        return Err(UsageError("no password on stdin".into()).into());
    }
    let phc = auth::hash(password).map_err(|e| anyhow::anyhow!("failed to hash: {e}"))?;
    use std::io::Write as _;
    writeln!(std::io::stdout().lock(), "{phc}").context("failed to print the hash")?;
    Ok(ExitCode::SUCCESS)
}
