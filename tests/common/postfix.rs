//! A real Postfix relay of the test's own, for what relays in the field do
//! that a test double only imitates: rate limits (anvil) and recipient
//! rejections. Its own instance: configuration, queue and data directories
//! under a directory of its own (`postfix -c DIR start-fg`), its smtpd on
//! a free loopback port, relaying everything to the test's sink. It shares
//! nothing with a system Postfix (no port 25, no /var/spool/postfix) or
//! with other tests' instances, and is stopped when dropped, also when the
//! test fails (and killed with the test process otherwise).
//!
//! Runs as root (Postfix's master does); `scripts/test.sh` installs it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How the relay limits and refuses.
#[derive(Debug, Clone, Default)]
pub struct PostfixOptions {
    /// `smtpd_client_message_rate_limit`: messages per client per
    /// `rate_unit` (0: none).
    pub message_rate: u32,
    /// `smtpd_client_connection_rate_limit`: connections per client per
    /// `rate_unit` (0: none).
    pub connection_rate: u32,
    /// `anvil_rate_time_unit` (e.g. `2s`); the default minute if None.
    pub rate_unit: Option<&'static str>,
    /// Recipients in this domain get `550 5.1.2` at RCPT.
    pub reject_domain: Option<&'static str>,
    /// Recipients in this domain get `450 4.7.1` at RCPT (a recipient's
    /// own transient refusal, as greylisting gives).
    pub defer_domain: Option<&'static str>,
}

pub struct Postfix {
    pub port: u16,
    dir: PathBuf,
    master: Child,
}

impl Postfix {
    /// Starts an instance relaying to 127.0.0.1:`sink_port`; returns once
    /// its master is up (its smtpd port is open from then on).
    pub async fn start(sink_port: u16, options: PostfixOptions) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let dir = std::env::temp_dir().join(format!("invoice-reminder-postfix-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["conf", "queue", "data"] {
            std::fs::create_dir_all(dir.join(sub)).expect("postfix directories");
        }
        // The data directory is Postfix's own (`postfix check` insists).
        let chowned = Command::new("chown")
            .arg("postfix")
            .arg(dir.join("data"))
            .status()
            .expect("chown");
        assert!(chowned.success(), "chown postfix (is Postfix installed?)");
        let access = dir.join("conf/access");
        let rejected = options.reject_domain.map(|d| {
            format!("{d} 550 5.1.2 <{d}>: Recipient address rejected: domain does not exist\n")
        });
        let deferred = options
            .defer_domain
            .map(|d| format!("{d} 450 4.7.1 <{d}>: Recipient address rejected: try again later\n"));
        std::fs::write(
            &access,
            [rejected, deferred]
                .into_iter()
                .flatten()
                .collect::<String>(),
        )
        .expect("access map");
        let main_cf = format!(
            "compatibility_level = 3.6\n\
             queue_directory = {queue}\n\
             data_directory = {data}\n\
             mail_owner = postfix\n\
             setgid_group = postdrop\n\
             inet_interfaces = 127.0.0.1\n\
             inet_protocols = ipv4\n\
             myhostname = relay.test\n\
             mydestination =\n\
             alias_maps =\n\
             alias_database =\n\
             mynetworks = 127.0.0.0/8\n\
             relayhost = [127.0.0.1]:{sink_port}\n\
             smtpd_relay_restrictions = permit_mynetworks, reject\n\
             smtpd_recipient_restrictions = check_recipient_access texthash:{access}\n\
             smtpd_client_event_limit_exceptions =\n\
             smtpd_client_message_rate_limit = {messages}\n\
             smtpd_client_connection_rate_limit = {connections}\n\
             anvil_rate_time_unit = {unit}\n\
             in_flow_delay = 0\n\
             maillog_file = /dev/stdout\n",
            queue = dir.join("queue").display(),
            data = dir.join("data").display(),
            access = access.display(),
            messages = options.message_rate,
            connections = options.connection_rate,
            unit = options.rate_unit.unwrap_or("60s"),
        );
        std::fs::write(dir.join("conf/main.cf"), main_cf).expect("main.cf");
        // Only what relaying needs, none of it chrooted.
        let master_cf = format!(
            "127.0.0.1:{port} inet n - n - - smtpd\n\
             cleanup unix n - n - 0 cleanup\n\
             qmgr unix n - n 300 1 qmgr\n\
             rewrite unix - - n - - trivial-rewrite\n\
             bounce unix - - n - 0 bounce\n\
             defer unix - - n - 0 bounce\n\
             trace unix - - n - 0 bounce\n\
             verify unix - - n - 1 verify\n\
             flush unix n - n 1000? 0 flush\n\
             proxymap unix - - n - - proxymap\n\
             smtp unix - - n - - smtp\n\
             relay unix - - n - - smtp\n\
             showq unix n - n - - showq\n\
             error unix - - n - - error\n\
             retry unix - - n - - error\n\
             discard unix - - n - - discard\n\
             anvil unix - - n - 1 anvil\n\
             scache unix - - n - 1 scache\n\
             postlog unix-dgram n - n - 1 postlogd\n"
        );
        std::fs::write(dir.join("conf/master.cf"), master_cf).expect("master.cf");
        let log = std::fs::File::create(dir.join("maillog")).expect("maillog");
        let mut cmd = Command::new(postfix_binary());
        cmd.arg("-c")
            .arg(dir.join("conf"))
            .arg("start-fg")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("maillog")))
            .stderr(Stdio::from(log));
        let master = super::pgbouncer::die_with_parent(&mut cmd)
            .spawn()
            .expect("start postfix (apt-get install postfix; see scripts/test.sh)");
        let relay = Self { port, dir, master };
        // Not by connecting: a probe would count against the connection
        // rate limit.
        super::wait_until("Postfix starts", Duration::from_secs(20), || async {
            relay.log().contains("daemon started")
        })
        .await;
        relay
    }

    /// Postfix's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("maillog")).unwrap_or_default()
    }

    /// The time of day (seconds since midnight, as the log gives it) of
    /// each log line containing `needle`, in order.
    pub fn times_of(&self, needle: &str) -> Vec<u32> {
        self.log()
            .lines()
            .filter(|line| line.contains(needle))
            .filter_map(|line| {
                // "Dec  5 01:02:03 relay.test postfix/..."
                let clock = line.split_whitespace().nth(2)?;
                let mut parts = clock.split(':').map(|p| p.parse::<u32>().ok());
                let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
                Some(h * 3600 + m * 60 + s)
            })
            .collect()
    }

    /// Messages Postfix relayed onward (`status=sent`).
    pub fn relayed(&self) -> usize {
        self.log().matches("status=sent").count()
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let _ = Command::new(postfix_binary())
            .arg("-c")
            .arg(self.dir.join("conf"))
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.master.kill();
        let _ = self.master.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn postfix_binary() -> PathBuf {
    ["/usr/sbin/postfix", "/usr/bin/postfix"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("postfix"))
}
