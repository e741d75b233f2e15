//! A TCP proxy the test controls, to make a real server misbehave on
//! demand: refuse connections (down), cut the connections it carries, stall
//! all traffic (a partition that drops nothing but delivers nothing), or
//! withhold the replies on connections already open (a reply lost in
//! flight). It moves bytes only; it understands no protocol.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// Hold every byte in both directions until the mode changes back.
    Stall,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Control {
    mode: Mode,
    /// Connections with an id below this get no replies (server to client
    /// bytes are held) until it is reset to 0.
    withhold_replies_below: u64,
    /// Bumped to cut every open connection.
    generation: u64,
}

pub struct Proxy {
    pub addr: SocketAddr,
    target: SocketAddr,
    control: watch::Sender<Control>,
    next_id: Arc<AtomicU64>,
    listener: Mutex<Option<JoinHandle<()>>>,
    sought: Sought,
}

/// Bytes looked for in what clients send, and how often they were seen.
type Sought = Arc<Mutex<Option<(Vec<u8>, Arc<AtomicU64>)>>>;

impl Proxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (control, _) = watch::channel(Control {
            mode: Mode::Pass,
            withhold_replies_below: 0,
            generation: 0,
        });
        let proxy = Self {
            addr,
            target,
            control,
            next_id: Arc::new(AtomicU64::new(1)),
            listener: Mutex::new(None),
            sought: Arc::new(Mutex::new(None)),
        };
        proxy.serve(listener);
        proxy
    }

    /// A proxy in front of the test Redis.
    pub async fn for_redis() -> Self {
        let url = super::redis_url();
        let hostport = url
            .trim_start_matches("redis://")
            .split('/')
            .next()
            .unwrap_or("127.0.0.1:6379")
            .rsplit('@')
            .next()
            .unwrap_or("127.0.0.1:6379")
            .to_owned();
        let target = tokio::net::lookup_host(hostport)
            .await
            .expect("resolve redis")
            .next()
            .expect("redis address");
        Self::start(target).await
    }

    /// From now on, counts how often clients send `bytes` on connections
    /// opened later (found across the proxy's reads too).
    pub fn count_sent(&self, bytes: &[u8]) -> Arc<AtomicU64> {
        let seen = Arc::new(AtomicU64::new(0));
        *self.sought.lock().unwrap() = Some((bytes.to_vec(), Arc::clone(&seen)));
        seen
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// A proxy in front of the test PostgreSQL, and `url` (a test database
    /// URL on 127.0.0.1:5432) rewritten to go through it.
    pub async fn for_postgres(url: &str) -> (Self, String) {
        let proxy = Self::start("127.0.0.1:5432".parse().expect("address")).await;
        let via = url.replace("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port()));
        assert_ne!(
            via, url,
            "TEST_POSTGRES_URL must point at 127.0.0.1:5432 for the proxy tests"
        );
        (proxy, via)
    }

    fn serve(&self, listener: TcpListener) {
        let target = self.target;
        let control = self.control.subscribe();
        let next_id = self.next_id.clone();
        let sought = Arc::clone(&self.sought);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let id = next_id.fetch_add(1, Ordering::SeqCst);
                let control = control.clone();
                let sought = sought.lock().unwrap().clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    carry(id, client, server, control, sought).await;
                });
            }
        });
        *self.listener.lock().unwrap() = Some(task);
    }

    pub fn set_mode(&self, mode: Mode) {
        self.control.send_modify(|c| c.mode = mode);
    }

    /// Replies on every connection open now are held back (requests still
    /// reach the server); connections opened later are unaffected.
    pub fn withhold_replies_on_open_connections(&self) {
        let below = self.next_id.load(Ordering::SeqCst);
        self.control
            .send_modify(|c| c.withhold_replies_below = below);
    }

    /// Delivers the held replies.
    pub fn deliver_replies(&self) {
        self.control.send_modify(|c| c.withhold_replies_below = 0);
    }

    /// Stops listening (new connections are refused) and cuts open ones.
    pub fn go_down(&self) {
        if let Some(task) = self.listener.lock().unwrap().take() {
            task.abort();
        }
        self.cut();
    }

    /// Listens again on the same port.
    pub async fn come_up(&self) {
        let listener = TcpListener::bind(self.addr)
            .await
            .unwrap_or_else(|e| panic!("cannot rebind proxy port {}: {e}", self.addr));
        self.serve(listener);
    }

    /// Closes every connection currently carried.
    pub fn cut(&self) {
        self.control.send_modify(|c| c.generation += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(task) = self.listener.lock().unwrap().take() {
            task.abort();
        }
        self.cut();
    }
}

async fn carry(
    id: u64,
    client: TcpStream,
    server: TcpStream,
    mut control: watch::Receiver<Control>,
    sought: Option<(Vec<u8>, Arc<AtomicU64>)>,
) {
    let start = control.borrow_and_update().generation;
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, control.clone(), |_c: &Control| false, sought);
    let down = pump(
        sr,
        cw,
        control.clone(),
        move |c: &Control| id < c.withhold_replies_below,
        None,
    );
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = async {
            while control.changed().await.is_ok() {
                if control.borrow().generation != start {
                    return;
                }
            }
        } => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut control: watch::Receiver<Control>,
    withheld: impl Fn(&Control) -> bool,
    sought: Option<(Vec<u8>, Arc<AtomicU64>)>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    // The end of the last read, so bytes split across two reads are found.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Some((bytes, seen)) = &sought
            && !bytes.is_empty()
        {
            tail.extend_from_slice(&buf[..n]);
            let found = tail.windows(bytes.len()).filter(|w| w == bytes).count();
            seen.fetch_add(found as u64, Ordering::SeqCst);
            let keep = tail.len().min(bytes.len() - 1);
            tail.drain(..tail.len() - keep);
        }
        loop {
            let held = {
                let c = control.borrow_and_update();
                c.mode == Mode::Stall || withheld(&c)
            };
            if !held {
                break;
            }
            if control.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
