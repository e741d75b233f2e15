//! A PgBouncer of the test's own (or the benchmark's), in transaction mode,
//! in front of the test PostgreSQL, on a free port; killed with its owner.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Makes the child die with this process even if it is killed before the
/// handle's Drop can run.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// A pgbouncer of the test's own, in transaction mode, in front of the
/// test PostgreSQL.
pub struct PgBouncer {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl PgBouncer {
    /// `password`: None lets every user in (`auth_type = trust`); Some
    /// requires it for the user `postgres` (`auth_type = plain`), and then
    /// also ignores `options`, so a worker without `pooler = "transaction"`
    /// (the PostgreSQL lock backend) gets as far as the login.
    pub async fn start(password: Option<&str>) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
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
             default_pool_size = 10\nmax_client_conn = 200\n\
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
        let child = die_with_parent(&mut cmd)
            .spawn()
            .expect("start pgbouncer (apt-get install pgbouncer; see README)");
        let bouncer = Self { port, dir, child };
        super::wait_until("pgbouncer listens", Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        bouncer
    }

    /// `url` (a test database on 127.0.0.1:5432) through this pgbouncer.
    pub fn url(&self, url: &str) -> String {
        url.replace("127.0.0.1:5432", &format!("127.0.0.1:{}", self.port))
    }

    pub fn log(&self) -> String {
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
