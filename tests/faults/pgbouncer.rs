//! Through a real PgBouncer in transaction mode (Debian's 1.18, as managed
//! poolers run it): the worker works with `database.pooler = "transaction"`
//! and the one setting every pooler user already has
//! (`ignore_startup_parameters = extra_float_digits`); `migrate` refuses;
//! a refused login is one configuration error naming `database.url`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{self, World};
use crate::harness::{self, Replica, ReplicaOptions};

/// A pgbouncer of the test's own, in transaction mode, in front of the
/// test PostgreSQL.
struct PgBouncer {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl PgBouncer {
    /// `password`: None lets every user in (`auth_type = trust`); Some
    /// requires it for the user `postgres` (`auth_type = plain`), and then
    /// also ignores `options`, so a worker without `pooler = "transaction"`
    /// (the PostgreSQL lock backend) gets as far as the login.
    async fn start(password: Option<&str>) -> Self {
        let port = harness::free_port();
        let dir = std::env::temp_dir().join(format!("invoice-reminder-pgbouncer-{port}"));
        std::fs::create_dir_all(&dir).expect("pgbouncer dir");
        let auth = match password {
            None => "trust",
            Some(_) => "plain",
        };
        let ini = format!(
            "[databases]\n* = host=127.0.0.1 port=5432\n\
             [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = {auth}\nauth_file = {users}\npool_mode = transaction\n\
             default_pool_size = 4\nmax_client_conn = 200\n\
             ignore_startup_parameters = extra_float_digits{more}\n",
            users = dir.join("users.txt").display(),
            more = if password.is_some() { ",options" } else { "" },
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).expect("pgbouncer.ini");
        std::fs::write(
            dir.join("users.txt"),
            format!("\"postgres\" \"{}\"\n", password.unwrap_or("")),
        )
        .expect("users.txt");
        let mut cmd = Command::new(pgbouncer_binary());
        // PgBouncer refuses to run as root; as root, tell it whom to become.
        if unsafe { libc::geteuid() } == 0 {
            cmd.arg("-u").arg("postgres");
        }
        cmd.arg(dir.join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("pgbouncer.log")).expect("pgbouncer log"),
            ));
        let child = harness::die_with_test(&mut cmd)
            .spawn()
            .expect("start pgbouncer (apt-get install pgbouncer; see README)");
        let bouncer = Self { port, dir, child };
        common::wait_until("pgbouncer listens", Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        bouncer
    }

    /// `url` (a test database on 127.0.0.1:5432) through this pgbouncer.
    fn url(&self, url: &str) -> String {
        url.replace("127.0.0.1:5432", &format!("127.0.0.1:{}", self.port))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pgbouncer_binary() -> PathBuf {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("pgbouncer"))
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A world whose worker reaches PostgreSQL through `bouncer`.
async fn world_through(bouncer: &PgBouncer, pooler: &str) -> World {
    let mut world = World::new().await;
    harness::fast_replicas(&mut world);
    let url = bouncer.url(&world.db.url);
    world
        .set("database.url", url)
        .set("database.pooler", pooler)
        .set("lock.backend", "redis");
    world
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_pooler_transaction_two_replicas_through_pgbouncer_mail_each_invoice_once() {
    let bouncer = PgBouncer::start(None).await;
    let world = world_through(&bouncer, "transaction").await;
    common::insert_overdue(world.pool(), 400).await;

    let out = common::cli(&world, &["run-once"]).await;
    assert!(out.status.success(), "{}\n{}", stderr(&out), bouncer.log());
    let mut replicas = harness::spawn_replicas(&world, 2);
    common::insert_overdue(world.pool(), 100).await;
    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    harness::stop_all(&mut replicas).await;
    for r in &replicas {
        assert!(
            !r.log().contains("prepared statement"),
            "{}\n{}",
            r.log(),
            bouncer.log()
        );
    }
    let out = common::cli(&world, &["audit", "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(world.sink.count(), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pooler_transaction_the_same_pgbouncer_turns_the_worker_away() {
    // The control experiment: the setting is what makes the above work.
    let bouncer = PgBouncer::start(None).await;
    let world = world_through(&bouncer, "none").await;
    common::insert_overdue(world.pool(), 10).await;

    let out = common::cli(&world, &["run-once"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unsupported startup parameter"),
        "{}",
        stderr(&out)
    );
    assert_eq!(world.sink.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_through_a_transaction_pooler_is_refused_with_a_line_saying_to_use_a_direct_url() {
    let bouncer = PgBouncer::start(None).await;
    let world = world_through(&bouncer, "transaction").await;

    let out = common::cli(&world, &["migrate"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("database.pooler") && err.contains("direct"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_with_the_postgres_lock_exits_2_naming_both_keys() {
    let mut world = World::new().await;
    world
        .set("database.pooler", "transaction")
        .set("lock.backend", "postgres");

    let out = common::cli(&world, &["run-once"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("database.pooler") && err.contains("lock.backend"),
        "{err}"
    );
    assert_eq!(world.sink.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_database_password_is_one_configuration_error_naming_database_url() {
    let bouncer = PgBouncer::start(Some("right-secret")).await;
    for (command, backend) in [("run-once", "redis"), ("run", "redis"), ("run", "postgres")] {
        let mut world = World::new().await;
        harness::fast_replicas(&mut world);
        let url = bouncer
            .url(&world.db.url)
            .replace("postgres@", "postgres:wrong-secret@");
        world.set("database.url", url).set("lock.backend", backend);
        let mut replica = Replica::spawn(
            &world,
            &format!("{command}-{backend}"),
            ReplicaOptions {
                command: vec![command.into()],
                ..ReplicaOptions::default()
            },
        );
        let status = replica
            .wait_exit(Duration::from_secs(20))
            .await
            .expect("exits");
        let log = replica.log();
        assert_eq!(status.code(), Some(2), "{command} ({backend}): {log}");
        assert!(log.contains("database.url"), "{log}");
        assert!(!log.contains("wrong-secret"), "the password leaked: {log}");
        assert!(!log.contains("result unknown"), "{log}");
    }
}
