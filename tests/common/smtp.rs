//! A real SMTP server for tests (mailin-embedded), capturing each message
//! and told on demand to accept, delay, or refuse with 4xx or 5xx.
//!
//! "Down" is not a mode of the sink: put a [`super::proxy::Proxy`] in front
//! of it and close that, so clients see a refused connection.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mailin_embedded::{Handler, Response, Server};

/// What the sink answers at the end of each message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Accept,
    /// Accept after this long (a slow server).
    Delay(Duration),
    /// `451` at the end of data: a transient failure.
    Refuse4xx,
    /// `554` at the end of data: a permanent failure.
    Refuse5xx,
}

/// One captured message.
#[derive(Debug, Clone)]
pub struct Received {
    pub from: String,
    pub to: Vec<String>,
    pub raw: String,
    /// Unfolded headers, in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The text body, MIME-decoded (the text part of a multipart message).
    pub body: String,
    /// The HTML part, decoded, if the message has one.
    pub html: Option<String>,
    /// The decoded Subject.
    pub subject: String,
    /// The top-level Content-Type, e.g. `multipart/alternative`.
    pub content_type: String,
    /// When the end of the message arrived.
    pub received_at: std::time::Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn invoice_id(&self) -> Option<i64> {
        self.header("X-Invoice-Id")?.trim().parse().ok()
    }

    pub fn period(&self) -> Option<String> {
        self.header("X-Reminder-Period")
            .map(|p| p.trim().to_owned())
    }
}

#[derive(Default)]
struct State {
    mode: Mutex<Option<Mode>>,
    received: Mutex<Vec<Received>>,
    refused: Mutex<u64>,
    /// Messages whose end of data arrived and that are not answered yet.
    answering: std::sync::atomic::AtomicUsize,
}

/// A running sink. It serves until the test process exits.
#[derive(Clone)]
pub struct SmtpSink {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl SmtpSink {
    pub fn start() -> Self {
        Self::start_on("127.0.0.1:0")
    }

    /// Listens on `addr` (`127.0.0.1:1025` for the demo sink).
    pub fn start_on(addr: &str) -> Self {
        let listener = TcpListener::bind(addr).expect("bind SMTP sink");
        let addr = listener.local_addr().expect("sink address");
        let state = Arc::new(State::default());
        *state.mode.lock().unwrap() = Some(Mode::Accept);
        let handler = SinkHandler {
            state: state.clone(),
            from: String::new(),
            to: Vec::new(),
            data: Vec::new(),
        };
        std::thread::spawn(move || {
            let mut server = Server::new(handler);
            // Pooled client connections each hold a server thread while idle.
            server
                .with_name("sink.test")
                .with_num_threads(128)
                .with_tcp_listener(listener);
            let _ = server.serve();
        });
        Self { addr, state }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.state.mode.lock().unwrap() = Some(mode);
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.state.received.lock().unwrap().len()
    }

    /// Messages answered with 4xx/5xx.
    pub fn refused(&self) -> u64 {
        *self.state.refused.lock().unwrap()
    }

    /// Messages whose end of data has arrived but that are not yet counted
    /// (a [`Mode::Delay`] holds them) nor refused. Once a client is gone
    /// and this is 0, [`Self::received`] is final for what it sent.
    pub fn answering(&self) -> usize {
        self.state
            .answering
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Invoice ids of every accepted message, in arrival order.
    pub fn invoice_ids(&self) -> Vec<i64> {
        self.received()
            .iter()
            .filter_map(Received::invoice_id)
            .collect()
    }
}

#[derive(Clone)]
struct SinkHandler {
    state: Arc<State>,
    from: String,
    to: Vec<String>,
    data: Vec<u8>,
}

impl Handler for SinkHandler {
    fn data_start(&mut self, _domain: &str, from: &str, _is8bit: bool, to: &[String]) -> Response {
        self.from = from.to_owned();
        self.to = to.to_vec();
        self.data.clear();
        mailin_embedded::response::OK
    }

    fn data(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.data.extend_from_slice(buf);
        Ok(())
    }

    fn data_end(&mut self) -> Response {
        let _answering = Answering::start(&self.state);
        let mode = self
            .state
            .mode
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(Mode::Accept);
        match mode {
            Mode::Refuse4xx => {
                *self.state.refused.lock().unwrap() += 1;
                return Response::custom(451, "4.3.0 try again later".to_owned());
            }
            Mode::Refuse5xx => {
                *self.state.refused.lock().unwrap() += 1;
                return Response::custom(554, "5.7.1 rejected".to_owned());
            }
            Mode::Delay(d) => std::thread::sleep(d),
            Mode::Accept => {}
        }
        let raw = String::from_utf8_lossy(&self.data).into_owned();
        let (headers, _) = parse(&raw);
        let parsed = mail_parser::MessageParser::default().parse(self.data.as_slice());
        let body = parsed
            .as_ref()
            .and_then(|m| m.body_text(0))
            .map(|b| b.into_owned())
            .unwrap_or_default();
        let html = parsed.as_ref().and_then(|m| {
            m.html_part(0)
                .filter(|p| matches!(p.body, mail_parser::PartType::Html(_)))
                .and_then(|_| m.body_html(0))
                .map(|h| h.into_owned())
        });
        let subject = parsed
            .as_ref()
            .and_then(|m| m.subject())
            .unwrap_or_default()
            .to_owned();
        let content_type = parsed
            .as_ref()
            .and_then(|m| {
                use mail_parser::MimeHeaders as _;
                m.content_type()
                    .map(|c| format!("{}/{}", c.ctype(), c.subtype().unwrap_or_default()))
            })
            .unwrap_or_default();
        self.state.received.lock().unwrap().push(Received {
            from: self.from.clone(),
            to: self.to.clone(),
            raw,
            headers,
            body,
            html,
            subject,
            content_type,
            received_at: std::time::Instant::now(),
        });
        mailin_embedded::response::OK
    }
}

/// Counts a message in [`State::answering`] until it is answered.
struct Answering<'a>(&'a State);

impl<'a> Answering<'a> {
    fn start(state: &'a State) -> Self {
        state
            .answering
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(state)
    }
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0
            .answering
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Splits a message into unfolded headers and body.
fn parse(raw: &str) -> (Vec<(String, String)>, String) {
    let normalized = raw.replace("\r\n", "\n");
    let (head, body) = normalized.split_once("\n\n").unwrap_or((&normalized, ""));
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.lines() {
        if line.starts_with(' ') || line.starts_with('\t') {
            if let Some(last) = headers.last_mut() {
                last.1.push(' ');
                last.1.push_str(line.trim());
            }
        } else if let Some((name, value)) = line.split_once(':') {
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
    }
    (headers, body.to_owned())
}
