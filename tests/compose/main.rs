//! `docker-compose.yml` and `config/docker.toml`, checked without Docker.
//!
//! The worker's configuration is loaded through the real loader
//! ([`Settings::load`]) exactly as compose hands it to a container: the
//! service's `environment`, whose `INVOICE_REMINDER_CONFIG` names the file a
//! bind mount puts in the container (mapped back to that file in this
//! checkout). A key renamed in either place is an unknown key, so these tests
//! fail instead of the demo. The rest checks the compose wiring the demo
//! relies on: three replicas with distinct names, healthchecks, start order,
//! and a stop grace period longer than the worker's own shutdown timeout.

mod images;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use invoice_reminder::config::{
    CONFIG_PATH_ENV, ConfigError, ConfigSource, ENV_PREFIX, LogFormat, Settings, parse_cron,
};
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_norway::Value;

const COMPOSE_FILE: &str = "docker-compose.yml";
/// The SMTP port mailpit listens on inside the compose network.
const MAILPIT_SMTP_PORT: u16 = 1025;
/// "Every few seconds": the longest gap between two demo ticks.
const DEMO_TICK_AT_MOST: Duration = Duration::from_secs(10);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------
// The compose file, as far as these tests read it. Each field accepts every
// form the compose specification allows for it (list or map, short or long).
// ---------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct Compose {
    services: BTreeMap<String, Service>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Service {
    image: Option<String>,
    build: Option<Value>,
    command: Option<Command>,
    environment: Option<Environment>,
    volumes: Vec<Volume>,
    depends_on: Option<DependsOn>,
    healthcheck: Option<Healthcheck>,
    deploy: Option<Deploy>,
    stop_grace_period: Option<String>,
    restart: Option<String>,
    hostname: Option<String>,
    container_name: Option<String>,
}

/// `command: run` or `command: ["run"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Command {
    Shell(String),
    Exec(Vec<String>),
}

/// `environment:` as a list of `KEY=VALUE` or as a map.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Environment {
    List(Vec<String>),
    Map(BTreeMap<String, Option<Value>>),
}

/// `SOURCE:TARGET[:MODE]`, or the long form.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Volume {
    Short(String),
    Long {
        source: Option<String>,
        target: String,
        #[serde(default)]
        read_only: bool,
    },
}

/// `depends_on:` as a list of names (meaning `service_started`) or a map.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum DependsOn {
    List(Vec<String>),
    Map(BTreeMap<String, Dependency>),
}

#[derive(Debug, Deserialize)]
struct Dependency {
    #[serde(default = "service_started")]
    condition: String,
}

fn service_started() -> String {
    "service_started".to_owned()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Healthcheck {
    test: Option<Value>,
    disable: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Deploy {
    replicas: Option<u32>,
}

/// A bind or volume mount, whichever syntax declared it.
struct Mount {
    source: Option<String>,
    target: String,
    read_only: bool,
}

impl Compose {
    fn service(&self, name: &str) -> &Service {
        self.services
            .get(name)
            .unwrap_or_else(|| panic!("{COMPOSE_FILE} has no service {name:?}"))
    }
}

impl Service {
    fn args(&self) -> Option<Vec<String>> {
        self.command.as_ref().map(|command| match command {
            Command::Shell(line) => line.split_whitespace().map(str::to_owned).collect(),
            Command::Exec(args) => args.clone(),
        })
    }

    /// The variables the container gets. Entries without a value are taken
    /// from the shell running compose; these tests assume a clean shell, so
    /// such variables are unset and left out.
    fn env(&self) -> Vec<(String, String)> {
        match &self.environment {
            None => Vec::new(),
            Some(Environment::List(entries)) => entries
                .iter()
                .filter_map(|entry| entry.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            Some(Environment::Map(map)) => map
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), scalar(v.as_ref()?))))
                .collect(),
        }
    }

    fn env_var(&self, name: &str) -> Option<String> {
        self.env()
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    fn mounts(&self) -> Vec<Mount> {
        self.volumes
            .iter()
            .map(|volume| match volume {
                Volume::Short(spec) => {
                    let parts: Vec<&str> = spec.split(':').collect();
                    match parts.as_slice() {
                        [target] => Mount {
                            source: None,
                            target: (*target).to_owned(),
                            read_only: false,
                        },
                        [source, target, rest @ ..] => Mount {
                            source: Some((*source).to_owned()),
                            target: (*target).to_owned(),
                            read_only: rest
                                .first()
                                .is_some_and(|mode| mode.split(',').any(|m| m == "ro")),
                        },
                        [] => unreachable!("split always yields one part"),
                    }
                }
                Volume::Long {
                    source,
                    target,
                    read_only,
                } => Mount {
                    source: source.clone(),
                    target: target.clone(),
                    read_only: *read_only,
                },
            })
            .collect()
    }

    /// Each dependency with its condition.
    fn depends_on(&self) -> BTreeMap<String, String> {
        match &self.depends_on {
            None => BTreeMap::new(),
            Some(DependsOn::List(names)) => names
                .iter()
                .map(|name| (name.clone(), service_started()))
                .collect(),
            Some(DependsOn::Map(map)) => map
                .iter()
                .map(|(name, dep)| (name.clone(), dep.condition.clone()))
                .collect(),
        }
    }

    /// The healthcheck's `test`, as written (`CMD`, `CMD-SHELL` or a line).
    fn healthcheck_test(&self) -> Vec<String> {
        let Some(check) = self.healthcheck.as_ref().filter(|c| !c.disable) else {
            return Vec::new();
        };
        match &check.test {
            Some(Value::String(line)) => vec![line.clone()],
            Some(Value::Sequence(items)) => items.iter().map(scalar).collect(),
            _ => Vec::new(),
        }
    }

    fn has_active_healthcheck(&self) -> bool {
        let test = self.healthcheck_test();
        !test.is_empty() && test.first().is_some_and(|t| t != "NONE")
    }

    fn stop_grace_period(&self) -> Duration {
        // Docker's default when the key is absent.
        self.stop_grace_period
            .as_deref()
            .map_or(Duration::from_secs(10), |text| {
                humantime::parse_duration(text)
                    .unwrap_or_else(|e| panic!("stop_grace_period {text:?}: {e}"))
            })
    }
}

/// A YAML scalar as compose turns it into an environment string.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        other => panic!("not a scalar in {COMPOSE_FILE}: {other:?}"),
    }
}

fn compose_text() -> String {
    let path = repo().join(COMPOSE_FILE);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()))
}

/// The compose file as compose reads it from a clean shell: every
/// `${NAME:-default}` is its default (images::variables_all_have_defaults
/// holds every variable to that form).
fn compose_value() -> Value {
    let text = images::in_a_clean_shell(&compose_text());
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{COMPOSE_FILE} is not YAML: {e}"))
}

fn compose() -> Compose {
    let mut value = compose_value();
    // `<<: *app` merges, as compose resolves them.
    value
        .apply_merge()
        .unwrap_or_else(|e| panic!("{COMPOSE_FILE}: a `<<` merge does not resolve: {e}"));
    serde_norway::from_value(value)
        .unwrap_or_else(|e| panic!("{COMPOSE_FILE} does not have the expected shape: {e}"))
}

// ---------------------------------------------------------------------------
// The worker's configuration, as a worker container would load it.
// ---------------------------------------------------------------------------

/// The worker container's environment, with its config path (a path inside
/// the container) replaced by the file in this checkout mounted there.
fn worker_config_source(compose: &Compose) -> ConfigSource {
    let worker = compose.service("worker");
    let mut env = worker.env();
    let (_, path) = env
        .iter_mut()
        .find(|(name, _)| name == CONFIG_PATH_ENV)
        .unwrap_or_else(|| panic!("the worker's environment does not set {CONFIG_PATH_ENV}"));
    let mount = worker
        .mounts()
        .into_iter()
        .find(|mount| mount.target == *path)
        .unwrap_or_else(|| panic!("no volume of the worker is mounted at {path}"));
    assert!(
        mount.read_only,
        "the worker's config file {path} should be mounted read-only"
    );
    let source = mount
        .source
        .unwrap_or_else(|| panic!("the mount at {path} has no source file"));
    // In the short syntax only a path starting with `.` or `/` is a bind
    // mount; anything else names a volume.
    assert!(
        source.starts_with('.'),
        "the config mount's source {source:?} should be a path relative to {COMPOSE_FILE}"
    );
    let on_host = repo().join(&source);
    assert!(
        on_host.is_file(),
        "{source} (mounted at {path}) does not exist"
    );
    *path = on_host.to_string_lossy().into_owned();
    ConfigSource { path: None, env }
}

fn worker_settings(compose: &Compose) -> Settings {
    Settings::load(&worker_config_source(compose))
        .unwrap_or_else(|e| panic!("the worker's configuration does not load: {e}"))
}

/// The shortest and the longest gap between ticks of `cron`.
fn tick_gaps(cron: &str) -> (Duration, Duration) {
    let cron = parse_cron(cron).expect("a valid cron expression");
    let start = Utc
        .with_ymd_and_hms(2026, 11, 30, 23, 58, 0)
        .single()
        .expect("a valid instant");
    let fires: Vec<_> = cron.iter_after(start).take(100).collect();
    let gaps: Vec<Duration> = fires
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).to_std().expect("ticks move forward"))
        .collect();
    let min = gaps.iter().min().copied().expect("at least two ticks");
    let max = gaps.iter().max().copied().expect("at least two ticks");
    (min, max)
}

/// The host of `scheme://[user[:password]@]host[:port][/path]`.
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    host_port.split(':').next().unwrap_or(host_port)
}

/// The password of `scheme://user:password@host...`, if any.
fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    userinfo.split_once(':').map(|(_, password)| password)
}

fn load_error(source: &ConfigSource) -> ConfigError {
    match Settings::load(source) {
        Ok(_) => panic!("expected a configuration error"),
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn worker_configuration_loads_through_the_real_loader_as_compose_passes_it() {
    let compose = compose();
    let source = worker_config_source(&compose);
    assert!(
        source.env.iter().any(|(name, _)| name == CONFIG_PATH_ENV),
        "the file comes from {CONFIG_PATH_ENV}, as in the container"
    );
    if let Err(e) = Settings::load(&source) {
        panic!("the worker's configuration does not load: {e}");
    }
}

#[test]
fn worker_ticks_every_few_seconds() {
    let settings = worker_settings(&compose());
    let (_, longest) = tick_gaps(settings.schedule.cron.as_str());
    assert!(
        longest <= DEMO_TICK_AT_MOST,
        "schedule.cron {:?} leaves up to {longest:?} between ticks; the demo wants a tick every few seconds",
        settings.schedule.cron
    );
}

#[test]
fn lock_min_hold_is_shorter_than_the_gap_between_ticks() {
    let settings = worker_settings(&compose());
    let (shortest, _) = tick_gaps(settings.schedule.cron.as_str());
    assert!(
        settings.lock.min_hold < shortest,
        "lock.min_hold {:?} must be below the cron interval {shortest:?}, or the next tick finds the lock still held",
        settings.lock.min_hold
    );
    assert!(settings.lock.renew_every < settings.lock.ttl);
}

#[test]
fn worker_logs_one_json_object_per_line() {
    let settings = worker_settings(&compose());
    assert_eq!(settings.log.format, LogFormat::Json);
}

#[test]
fn worker_mails_through_the_mailpit_service() {
    let compose = compose();
    let settings = worker_settings(&compose);
    assert_eq!(settings.smtp.host, "mailpit");
    assert_eq!(settings.smtp.port, MAILPIT_SMTP_PORT);
    let mailpit = compose.service(&settings.smtp.host);
    assert!(
        mailpit
            .image
            .as_deref()
            .is_some_and(|image| image.starts_with("axllent/mailpit")),
        "the smtp.host service should run mailpit"
    );
}

#[test]
fn worker_connects_to_the_compose_postgres_database_with_its_password() {
    let compose = compose();
    let settings = worker_settings(&compose);
    let options = invoice_reminder::db::options::connect_options(&settings);
    let postgres = compose.service(options.get_host());
    assert!(
        postgres
            .image
            .as_deref()
            .is_some_and(|image| image.starts_with("postgres:")),
        "database.url should name the postgres service, not {:?}",
        options.get_host()
    );
    assert_eq!(options.get_port(), 5432);
    let database = postgres
        .env_var("POSTGRES_DB")
        .or_else(|| postgres.env_var("POSTGRES_USER"))
        .unwrap_or_else(|| "postgres".to_owned());
    assert_eq!(options.get_database(), Some(database.as_str()));
    if postgres.env_var("POSTGRES_HOST_AUTH_METHOD").as_deref() != Some("trust") {
        assert_eq!(
            url_password(settings.database.url.expose_secret()),
            postgres.env_var("POSTGRES_PASSWORD").as_deref(),
            "database.url's password should be the postgres service's POSTGRES_PASSWORD"
        );
    }
}

#[test]
fn worker_locks_in_the_compose_redis() {
    let compose = compose();
    let settings = worker_settings(&compose);
    let host = url_host(settings.redis.url.expose_secret());
    let redis = compose.service(host);
    assert!(
        redis
            .image
            .as_deref()
            .is_some_and(|image| image.starts_with("redis:")),
        "redis.url should name the redis service, not {host:?}"
    );
}

#[test]
fn docker_waits_longer_than_the_worker_shutdown_timeout_before_killing_it() {
    let compose = compose();
    let settings = worker_settings(&compose);
    let grace = compose.service("worker").stop_grace_period();
    assert!(
        grace > settings.shutdown.timeout,
        "stop_grace_period {grace:?} must be longer than shutdown.timeout {:?}",
        settings.shutdown.timeout
    );
}

#[test]
fn compose_runs_three_worker_replicas_each_with_its_own_replica_id() {
    let compose = compose();
    let worker = compose.service("worker");
    assert_eq!(worker.deploy.as_ref().and_then(|d| d.replicas), Some(3));
    assert_eq!(worker.restart.as_deref(), Some("unless-stopped"));
    // replica_id defaults to hostname-pid, and each replica has a hostname
    // of its own, unless compose pins one or a replica_id is configured.
    assert!(worker.hostname.is_none() && worker.container_name.is_none());
    let replica_id_env = format!("{ENV_PREFIX}REPLICA_ID");
    assert!(worker.env_var(&replica_id_env).is_none());
    let source = worker_config_source(&compose);
    let path = source
        .env
        .iter()
        .find(|(name, _)| name == CONFIG_PATH_ENV)
        .map(|(_, path)| path.clone())
        .expect("config path");
    let file: toml::Table = std::fs::read_to_string(&path)
        .expect("read the worker's config file")
        .parse()
        .expect("the worker's config file is TOML");
    assert!(
        !file.contains_key("replica_id"),
        "{path} must not set replica_id: all replicas would share it"
    );
}

#[test]
fn postgres_and_redis_have_healthchecks() {
    let compose = compose();
    for name in ["postgres", "redis"] {
        assert!(
            compose.service(name).has_active_healthcheck(),
            "{name} needs a healthcheck: the app waits for service_healthy"
        );
    }
}

#[test]
fn the_worker_healthcheck_asks_its_own_healthz_with_the_health_command() {
    let compose = compose();
    let worker = compose.service("worker");
    let test = worker.healthcheck_test();
    assert!(
        worker.has_active_healthcheck(),
        "the worker needs a healthcheck: a hung replica must show as unhealthy"
    );
    // Exec form, so no shell is needed in the slim image: the binary itself.
    assert_eq!(
        test,
        vec!["CMD", "invoice-reminder", "health"],
        "the healthcheck should run `invoice-reminder health` (no curl in the image)"
    );
    let settings = worker_settings(&compose);
    let listen = settings
        .http
        .listen
        .expect("`health` asks http.listen: config/docker.toml must set it");
    assert!(
        listen.ip().is_unspecified(),
        "http.listen {listen} should listen on every interface so Prometheus can scrape it"
    );
}

#[test]
fn the_optional_prometheus_scrapes_the_port_the_workers_listen_on() {
    let compose = compose();
    let prometheus = compose.service("prometheus");
    let mount = prometheus
        .mounts()
        .into_iter()
        .find(|m| m.target == "/etc/prometheus")
        .expect("prometheus mounts its configuration at /etc/prometheus");
    let source = mount.source.expect("a bind mount");
    let config: Value = serde_norway::from_str(
        &std::fs::read_to_string(repo().join(&source).join("prometheus.yml")).unwrap(),
    )
    .unwrap();
    let job = &config["scrape_configs"][0]["dns_sd_configs"][0];
    let listen = worker_settings(&compose).http.listen.expect("http.listen");

    assert_eq!(job["names"][0].as_str(), Some("worker"), "{job:?}");
    assert_eq!(
        job["port"].as_u64(),
        Some(u64::from(listen.port())),
        "{job:?}"
    );
    assert!(repo().join(&source).join("alerts.yml").is_file());
}

#[test]
fn services_start_in_order_database_then_migrate_then_seed_then_workers() {
    let compose = compose();
    let expect = |service: &str, wanted: &[(&str, &str)]| {
        let actual = compose.service(service).depends_on();
        for (dependency, condition) in wanted {
            assert_eq!(
                actual.get(*dependency).map(String::as_str),
                Some(*condition),
                "{service} should depend on {dependency} with condition {condition}"
            );
        }
    };
    expect("migrate", &[("postgres", "service_healthy")]);
    expect("seed", &[("migrate", "service_completed_successfully")]);
    expect(
        "worker",
        &[
            ("redis", "service_healthy"),
            ("mailpit", "service_started"),
            ("migrate", "service_completed_successfully"),
            ("seed", "service_completed_successfully"),
        ],
    );
}

#[test]
fn migrate_seed_and_worker_run_one_image_built_once() {
    let compose = compose();
    let [migrate, seed, worker] = ["migrate", "seed", "worker"].map(|name| compose.service(name));
    for (name, service) in [("migrate", migrate), ("seed", seed), ("worker", worker)] {
        assert_eq!(
            service.image.as_deref(),
            Some("invoice-reminder:local"),
            "{name} should run the locally built image"
        );
        assert!(service.build.is_some(), "{name} should build that image");
        assert_eq!(
            service.env(),
            worker.env(),
            "{name} should see the worker's configuration"
        );
    }
    assert_eq!(migrate.args(), Some(vec!["migrate".to_owned()]));
    assert_eq!(
        seed.args()
            .as_deref()
            .and_then(<[String]>::first)
            .map(String::as_str),
        Some("seed")
    );
    assert!(
        worker.args().is_none_or(|args| args == ["run".to_owned()]),
        "the worker runs `run` (the image's default command)"
    );
}

#[test]
fn a_key_renamed_in_the_config_file_fails_to_load() {
    let mut source = worker_config_source(&compose());
    let (_, path) = source
        .env
        .iter_mut()
        .find(|(name, _)| name == CONFIG_PATH_ENV)
        .expect("config path");
    let text = std::fs::read_to_string(&*path).expect("read the worker's config file");
    let renamed = text.replacen("\nformat = ", "\nfromat = ", 1);
    assert_ne!(renamed, text, "the worker's config file sets log.format");
    let copy = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("docker-renamed-{}.toml", std::process::id()));
    std::fs::write(&copy, renamed).expect("write the renamed copy");
    *path = copy.to_string_lossy().into_owned();
    let error = load_error(&source);
    let _ = std::fs::remove_file(&copy);
    assert!(error.key.starts_with("log.fromat"), "{error}");
    assert_eq!(error.reason, "unknown key");
}

#[test]
fn a_key_renamed_in_the_compose_environment_fails_to_load() {
    let mut source = worker_config_source(&compose());
    source
        .env
        .push((format!("{ENV_PREFIX}SMTP__HOSTNAME"), "mailpit".to_owned()));
    let error = load_error(&source);
    assert!(error.key.starts_with("smtp.hostname"), "{error}");
    assert_eq!(error.reason, "unknown key");
}
