//! A port nothing listens on, kept that way: a socket bound to it and
//! never listening, held as long as the test holds it. A connection gets
//! "connection refused", and no other test's server can be given the port
//! meanwhile (a port bound and dropped is free for the next bind, and a
//! parallel test's relay took one once and got the mail).

/// A local port that refuses connections while this lives.
pub struct ClosedPort {
    _bound: tokio::net::TcpSocket,
    pub port: u16,
}

impl ClosedPort {
    pub fn new() -> Self {
        let bound = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        bound
            .bind("127.0.0.1:0".parse().expect("an address"))
            .expect("bind a local port");
        let port = bound.local_addr().expect("its address").port();
        Self {
            _bound: bound,
            port,
        }
    }
}
