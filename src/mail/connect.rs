//! Opening one connection to the relay: TCP (its writes watched, see
//! `written`), TLS as configured, EHLO, whether it offers PIPELINING, and
//! the login; what a refusal on the way means ([`ConnectError`]).

use std::sync::Arc;

use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, Certificate, TlsParameters};
use lettre::transport::smtp::commands::Ehlo;
use lettre::transport::smtp::extension::ClientId;
use secrecy::ExposeSecret;
use tokio::time::timeout;

use super::written::{Watched, Written};
use crate::config::{SmtpSettings, SmtpTls};

/// A connection made: the session, whether it offers PIPELINING, and what
/// watches its writes (None with implicit TLS).
pub(super) type Connected = (AsyncSmtpConnection, bool, Option<Arc<Written>>);

/// Why no connection could be made.
pub(super) enum ConnectError {
    /// The server answered, but not with a session for us (421 too many
    /// connections, or a 4xx greeting).
    Busy(String),
    LoginRefused(String),
    Failed(String),
}

/// What a connection is opened with.
pub(super) struct Connector<'a> {
    pub settings: &'a SmtpSettings,
    /// `smtp.ca_file`, read once.
    pub extra_root: Option<&'a Certificate>,
    pub hello: &'a ClientId,
}

impl Connector<'_> {
    fn tls(&self) -> Result<Option<TlsParameters>, String> {
        let s = self.settings;
        if s.tls == SmtpTls::None {
            return Ok(None);
        }
        let mut builder = TlsParameters::builder(s.host.clone());
        if let Some(cert) = self.extra_root {
            builder = builder.add_root_certificate(cert.clone());
        }
        builder.build_rustls().map(Some).map_err(|e| e.to_string())
    }

    /// A new connection, greeted, upgraded and logged in as configured,
    /// whether the server offers PIPELINING on it, and (but with implicit
    /// TLS, where lettre opens the socket) what watches its writes.
    pub async fn connect(&self) -> Result<Connected, ConnectError> {
        let s = self.settings;
        let at = |e: &dyn std::fmt::Display| {
            format!("cannot connect to SMTP server {}:{}: {e}", s.host, s.port)
        };
        let tls = self.tls().map_err(|e| ConnectError::Failed(at(&e)))?;
        let connecting = async {
            let mut watch = None;
            let mut conn = match (s.tls, tls.clone()) {
                // Implicit TLS: lettre wraps the socket itself.
                (SmtpTls::Tls, Some(params)) => AsyncSmtpConnection::connect_tokio1(
                    (s.host.as_str(), s.port),
                    Some(s.timeout),
                    self.hello,
                    Some(params),
                    None,
                )
                .await
                .map_err(|e| refusal(&e, at(&e)))?,
                _ => {
                    let tcp = tokio::net::TcpStream::connect((s.host.as_str(), s.port))
                        .await
                        .map_err(|e| ConnectError::Failed(at(&e)))?;
                    // Each write waits for its reply before the next, but a
                    // write that ever followed an unanswered one would wait
                    // for the server's delayed ACK under Nagle's algorithm,
                    // as when lettre wrote the content and the final "."
                    // separately (BENCHMARKS.md, "TCP_NODELAY").
                    tcp.set_nodelay(true)
                        .map_err(|e| ConnectError::Failed(at(&e)))?;
                    let written = Arc::new(Written::default());
                    watch = Some(Arc::clone(&written));
                    AsyncSmtpConnection::connect_with_transport(
                        Box::new(Watched::new(tcp, written)),
                        self.hello,
                    )
                    .await
                    .map_err(|e| refusal(&e, at(&e)))?
                }
            };
            if s.tls == SmtpTls::Starttls {
                if !conn.can_starttls() {
                    return Err(ConnectError::Failed(at(
                        &"the server does not offer STARTTLS",
                    )));
                }
                if let Some(params) = tls {
                    conn.starttls(params, self.hello)
                        .await
                        .map_err(|e| ConnectError::Failed(at(&format!("STARTTLS failed: {e}"))))?;
                }
            }
            let pipelining = offers_pipelining(&mut conn, self.hello).await;
            if let (Some(user), Some(password)) = (&s.username, &s.password) {
                let credentials =
                    Credentials::new(user.clone(), password.expose_secret().to_owned());
                if let Err(e) = conn
                    .auth(&[Mechanism::Plain, Mechanism::Login], &credentials)
                    .await
                {
                    return Err(if e.is_permanent() {
                        ConnectError::LoginRefused(format!("{} (smtp.username {user:?})", e))
                    } else {
                        refusal(&e, at(&format!("authentication failed: {e}")))
                    });
                }
            }
            Ok::<_, ConnectError>((conn, pipelining, watch))
        };
        match timeout(s.timeout, connecting).await {
            Ok(result) => result,
            Err(_) => Err(ConnectError::Failed(at(&format!(
                "timed out after {}",
                humantime::format_duration(s.timeout)
            )))),
        }
    }
}

/// Whether the server offers PIPELINING: lettre keeps only the EHLO
/// keywords it uses itself, so the EHLO is asked again (once per
/// connection, before AUTH) and its lines read. Any trouble: no.
async fn offers_pipelining(conn: &mut AsyncSmtpConnection, hello: &ClientId) -> bool {
    match conn.command(Ehlo::new(hello.clone())).await {
        Ok(response) => response
            .message()
            .any(|line| line.trim().eq_ignore_ascii_case("PIPELINING")),
        Err(_) => false,
    }
}

/// A connect error with a 4xx reply is the server being busy with us
/// (too many connections); anything else is a failure to connect.
fn refusal(e: &lettre::transport::smtp::Error, message: String) -> ConnectError {
    if e.is_transient() {
        ConnectError::Busy(message)
    } else {
        ConnectError::Failed(message)
    }
}
