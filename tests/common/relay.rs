//! A small SMTP relay the tests control, for what the sink cannot do:
//! limit concurrent connections (421 at once beyond N, as Office 365 and
//! connection-limiting fronts do, optionally before the accepted ones have
//! greeted), reply to RCPT with 4xx or 5xx, require AUTH and refuse bad
//! credentials, offer STARTTLS with a certificate from a CA of the
//! test's own, cut connections while a message's data is being written,
//! and read a message through its final dot and reset instead of replying.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// How the relay behaves.
#[derive(Clone, Default)]
pub struct RelayOptions {
    /// Connections served at once; more get `421` at once and are closed.
    /// [`Relay::set_max_connections`] changes it while the relay runs.
    pub max_connections: Option<usize>,
    /// Accepted connections hold their greeting until the relay has refused
    /// a connection (or this long has passed): the refusals arrive before
    /// any greeting, as behind a front that counts connections itself.
    pub hold_greeting: Option<Duration>,
    /// What accepted connections greet with; None: `220 relay.test ESMTP`.
    pub greeting: Option<&'static str>,
    /// The reply to every RCPT (`(450, "4.2.1 mailbox busy")`); None: 250.
    pub rcpt_reply: Option<(u16, &'static str)>,
    /// The reply to every MAIL (`(450, "4.7.1 Client host rejected")`);
    /// None: 250.
    pub mail_reply: Option<(u16, &'static str)>,
    /// Required credentials (AUTH PLAIN or LOGIN).
    pub auth: Option<(String, String)>,
    /// Offer STARTTLS (and require it before MAIL).
    pub tls: bool,
    /// Offer PIPELINING (RFC 2920). Without it, a client must wait for
    /// each reply; the relay counts commands that arrive behind another.
    pub pipelining: bool,
    /// The first this many messages are cut while the client is still
    /// writing them: after its `354` the relay reads nothing more and drops
    /// the connection with a reset, as a relay restarting mid-message does
    /// (a server's end that closes with data unread sends a reset). Only a
    /// message larger than the sockets' buffers is still being written
    /// then.
    pub cut_messages: usize,
    /// The first this many messages are read through their final dot, and
    /// then the connection is dropped with a reset instead of a reply, as
    /// when a relay's process dies after queueing a message.
    pub reset_after_end: usize,
    /// Each reply to a message's final dot waits for a permit of this
    /// semaphore (taken for good): the test decides when the relay
    /// answers, as a slow relay does.
    pub end_replies: Option<Arc<tokio::sync::Semaphore>>,
}

/// What a connection beyond the limit is told before it is closed.
const TOO_MANY: &[u8] = b"421 4.7.0 Too many concurrent SMTP connections\r\n";

#[derive(Default)]
struct State {
    /// The connection limit now (0: none).
    limit: AtomicUsize,
    /// Signalled when a connection is refused.
    refused: tokio::sync::Notify,
    open: AtomicUsize,
    most_open: AtomicUsize,
    refused_connections: AtomicUsize,
    rcpt_commands: AtomicUsize,
    /// Commands that arrived while another was still unanswered (pipelined).
    pipelined: AtomicUsize,
    /// Messages whose final dot came with the next message's MAIL behind
    /// it, before the relay replied to the dot.
    riders: AtomicUsize,
    /// Messages read through their final dot.
    ends: AtomicUsize,
    auth_failures: AtomicUsize,
    /// Messages still to cut half-way (see [`RelayOptions::cut_messages`]).
    to_cut: AtomicUsize,
    cut: AtomicUsize,
    /// Messages still to read and leave unanswered (see
    /// [`RelayOptions::reset_after_end`]), and those read so.
    to_reset: AtomicUsize,
    unanswered: Mutex<Vec<String>>,
    messages: Mutex<Vec<String>>,
}

pub struct Relay {
    pub port: u16,
    /// The CA's certificate (PEM), for `smtp.ca_file`.
    pub ca_pem: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Relay {
    pub async fn start(options: RelayOptions) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let port = listener.local_addr().expect("relay address").port();
        let (ca_pem, acceptor) = tls_acceptor();
        let state = Arc::new(State::default());
        state
            .limit
            .store(options.max_connections.unwrap_or(0), Ordering::SeqCst);
        state.to_cut.store(options.cut_messages, Ordering::SeqCst);
        state
            .to_reset
            .store(options.reset_after_end, Ordering::SeqCst);
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (state, options, acceptor) =
                    (shared.clone(), options.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let _ = stream.set_nodelay(true);
                    if options.cut_messages > 0 || options.reset_after_end > 0 {
                        // Closed with a reset, as with data left unread.
                        let _ = stream.set_zero_linger();
                    }
                    serve(stream, state, options, acceptor).await;
                });
            }
        });
        Self {
            port,
            ca_pem,
            state,
            task,
        }
    }

    pub fn messages(&self) -> usize {
        self.state.messages.lock().unwrap().len()
    }

    /// Serves up to `max` connections at once from now on.
    pub fn set_max_connections(&self, max: usize) {
        self.state.limit.store(max, Ordering::SeqCst);
    }

    /// (Message-ID without angle brackets, `X-Invoice-Id`,
    /// `X-Reminder-Period`) of each message received, headers unfolded.
    pub fn listings(&self) -> Vec<(String, String, String)> {
        self.state
            .messages
            .lock()
            .unwrap()
            .iter()
            .map(|m| {
                let mut headers: Vec<(String, String)> = Vec::new();
                for line in m.lines().take_while(|l| !l.is_empty()) {
                    if line.starts_with([' ', '\t']) {
                        if let Some(last) = headers.last_mut() {
                            last.1.push(' ');
                            last.1.push_str(line.trim());
                        }
                    } else if let Some((name, value)) = line.split_once(':') {
                        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
                    }
                }
                let h = |name: &str| {
                    headers
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default()
                };
                (
                    h("message-id")
                        .trim_start_matches('<')
                        .trim_end_matches('>')
                        .to_owned(),
                    h("x-invoice-id"),
                    h("x-reminder-period"),
                )
            })
            .collect()
    }

    /// The Message-ID of each message received, in order of arrival.
    pub fn message_ids(&self) -> Vec<String> {
        self.state
            .messages
            .lock()
            .unwrap()
            .iter()
            .filter_map(|m| {
                m.lines().find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("message-id")
                        .then(|| value.trim().to_owned())
                })
            })
            .collect()
    }

    pub fn most_open(&self) -> usize {
        self.state.most_open.load(Ordering::SeqCst)
    }

    pub fn refused_connections(&self) -> usize {
        self.state.refused_connections.load(Ordering::SeqCst)
    }

    /// Commands that arrived in the same write as an earlier, unanswered
    /// one.
    pub fn pipelined_commands(&self) -> usize {
        self.state.pipelined.load(Ordering::SeqCst)
    }

    /// How many messages' final dots had the next message's MAIL behind
    /// them, written before the relay replied to the dot.
    pub fn envelopes_behind_an_end(&self) -> usize {
        self.state.riders.load(Ordering::SeqCst)
    }

    /// How many messages were read through their final dot (answered or
    /// not).
    pub fn ends_read(&self) -> usize {
        self.state.ends.load(Ordering::SeqCst)
    }

    pub fn rcpt_commands(&self) -> usize {
        self.state.rcpt_commands.load(Ordering::SeqCst)
    }

    /// Messages cut while the client was still writing them.
    pub fn cut_messages(&self) -> usize {
        self.state.cut.load(Ordering::SeqCst)
    }

    /// Messages read through their final dot and left without a reply.
    pub fn unanswered(&self) -> Vec<String> {
        self.state.unanswered.lock().unwrap().clone()
    }

    pub fn auth_failures(&self) -> usize {
        self.state.auth_failures.load(Ordering::SeqCst)
    }
}

/// A CA of the test's own and a server certificate for 127.0.0.1 it signed.
fn tls_acceptor() -> (String, tokio_rustls::TlsAcceptor) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "invoice-reminder test CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let key = rcgen::KeyPair::generate().expect("server key");
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server params");
    let cert = params.signed_by(&key, &issuer).expect("server certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("TLS config");
    (
        ca_cert.pem(),
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    )
}

async fn serve(
    stream: TcpStream,
    state: Arc<State>,
    options: RelayOptions,
    acceptor: tokio_rustls::TlsAcceptor,
) {
    let open = state.open.fetch_add(1, Ordering::SeqCst) + 1;
    let _closed = Closed(state.clone());
    let limit = state.limit.load(Ordering::SeqCst);
    if limit > 0 && open > limit {
        state.refused_connections.fetch_add(1, Ordering::SeqCst);
        state.refused.notify_waiters();
        let mut stream = stream;
        let _ = stream.write_all(TOO_MANY).await;
        return;
    }
    state.most_open.fetch_max(open, Ordering::SeqCst);
    if let Some(longest) = options.hold_greeting {
        let refused = state.refused.notified();
        if state.refused_connections.load(Ordering::SeqCst) == 0 {
            let _ = tokio::time::timeout(longest, refused).await;
        }
    }
    let mut plain = BufReader::new(stream);
    let greeting = format!("{}\r\n", options.greeting.unwrap_or("220 relay.test ESMTP"));
    if plain
        .get_mut()
        .write_all(greeting.as_bytes())
        .await
        .is_err()
        || !greeting.starts_with('2')
    {
        return;
    }
    if let Some(Upgrade) = session(&mut plain, &state, &options, false).await {
        let Ok(tls) = acceptor.accept(plain.into_inner()).await else {
            return;
        };
        let mut tls = BufReader::new(tls);
        let _ = session(&mut tls, &state, &options, true).await;
    }
}

/// Decrements the open count when a connection ends.
struct Closed(Arc<State>);

impl Drop for Closed {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The client asked for STARTTLS.
struct Upgrade;

async fn session<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut BufReader<S>,
    state: &State,
    options: &RelayOptions,
    secure: bool,
) -> Option<Upgrade> {
    let mut authed = options.auth.is_none();
    let mut line = String::new();
    // Recipients accepted in the current transaction: DATA without any is
    // refused, as real servers do.
    let mut accepted = 0usize;
    loop {
        line.clear();
        if conn.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        if !conn.buffer().is_empty() {
            state.pipelined.fetch_add(1, Ordering::SeqCst);
        }
        let command = line.trim_end().to_owned();
        let verb = command
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        let reply: String = match verb.as_str() {
            "EHLO" | "HELO" => {
                let mut r = String::from("250-relay.test\r\n");
                if options.tls && !secure {
                    r.push_str("250-STARTTLS\r\n");
                }
                if options.auth.is_some() {
                    r.push_str("250-AUTH PLAIN LOGIN\r\n");
                }
                if options.pipelining {
                    r.push_str("250-PIPELINING\r\n");
                }
                r.push_str("250 8BITMIME\r\n");
                r
            }
            "STARTTLS" if options.tls && !secure => {
                conn.get_mut()
                    .write_all(b"220 2.0.0 go ahead\r\n")
                    .await
                    .ok()?;
                return Some(Upgrade);
            }
            "AUTH" => {
                let given = credentials(conn, &command).await?;
                if options.auth.as_ref() == Some(&given) {
                    authed = true;
                    "235 2.7.0 authenticated\r\n".into()
                } else {
                    state.auth_failures.fetch_add(1, Ordering::SeqCst);
                    "535 5.7.8 authentication credentials invalid\r\n".into()
                }
            }
            "MAIL" if options.tls && !secure => "530 5.7.0 must issue STARTTLS first\r\n".into(),
            "MAIL" if !authed => "530 5.7.0 authentication required\r\n".into(),
            "MAIL" if options.mail_reply.is_some() => {
                let (code, text) = options.mail_reply.unwrap_or_default();
                format!("{code} {text}\r\n")
            }
            "MAIL" | "RSET" | "NOOP" => {
                accepted = 0;
                "250 2.0.0 ok\r\n".into()
            }
            "RCPT" => {
                state.rcpt_commands.fetch_add(1, Ordering::SeqCst);
                match options.rcpt_reply {
                    Some((code, text)) => format!("{code} {text}\r\n"),
                    None => {
                        accepted += 1;
                        "250 2.1.5 ok\r\n".into()
                    }
                }
            }
            "DATA" if accepted == 0 => "554 5.5.1 no valid recipients\r\n".into(),
            "DATA" => {
                conn.get_mut().write_all(b"354 go ahead\r\n").await.ok()?;
                let mut message = String::new();
                let take_one = |left: &AtomicUsize| {
                    left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                };
                if take_one(&state.to_cut) {
                    // Nothing of the data read: the connection goes, with
                    // a reset, while the client writes.
                    state.cut.fetch_add(1, Ordering::SeqCst);
                    return None;
                }
                let reset = take_one(&state.to_reset);
                loop {
                    line.clear();
                    if conn.read_line(&mut line).await.ok()? == 0 {
                        return None;
                    }
                    if line == ".\r\n" {
                        // Riders first: an end counted is one whose rider,
                        // if any, is counted too.
                        if conn.buffer().starts_with(b"MAIL") {
                            state.riders.fetch_add(1, Ordering::SeqCst);
                        }
                        state.ends.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    message.push_str(&line);
                }
                if reset {
                    // The whole message read, final dot included; no reply.
                    state.unanswered.lock().unwrap().push(message);
                    return None;
                }
                if let Some(replies) = &options.end_replies {
                    replies.acquire().await.ok()?.forget();
                }
                state.messages.lock().unwrap().push(message);
                "250 2.0.0 queued\r\n".into()
            }
            "QUIT" => {
                let _ = conn.get_mut().write_all(b"221 2.0.0 bye\r\n").await;
                return None;
            }
            _ => "502 5.5.1 unknown command\r\n".into(),
        };
        conn.get_mut().write_all(reply.as_bytes()).await.ok()?;
    }
}

/// (user, password) from `AUTH PLAIN <b64>` or `AUTH LOGIN` (two prompts).
async fn credentials<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut BufReader<S>,
    command: &str,
) -> Option<(String, String)> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let parts: Vec<&str> = command.split_whitespace().collect();
    let mechanism = parts.get(1)?.to_ascii_uppercase();
    let mut read = async |prompt: &[u8]| -> Option<String> {
        conn.get_mut().write_all(prompt).await.ok()?;
        let mut line = String::new();
        conn.read_line(&mut line).await.ok()?;
        Some(line.trim_end().to_owned())
    };
    match mechanism.as_str() {
        "PLAIN" => {
            let encoded = match parts.get(2) {
                Some(e) => (*e).to_owned(),
                None => read(b"334 \r\n").await?,
            };
            let decoded = b64.decode(encoded).ok()?;
            let mut fields = decoded
                .split(|b| *b == 0)
                .map(|f| String::from_utf8_lossy(f).into_owned());
            let _authzid = fields.next()?;
            Some((fields.next()?, fields.next()?))
        }
        "LOGIN" => {
            let user = b64.decode(read(b"334 VXNlcm5hbWU6\r\n").await?).ok()?;
            let pass = b64.decode(read(b"334 UGFzc3dvcmQ6\r\n").await?).ok()?;
            Some((
                String::from_utf8_lossy(&user).into(),
                String::from_utf8_lossy(&pass).into(),
            ))
        }
        _ => None,
    }
}
