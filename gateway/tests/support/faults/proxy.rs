//! A TCP proxy between one node and the database, which the test controls:
//!
//! - `cut`: every connection is reset and new ones are reset at once, as when the network
//!   between the node and the database fails (until `heal`);
//! - `delay(d)`: what the node sends reaches the database `d` later, so every round trip
//!   takes `d` more (a slow or distant database);
//! - `drop_connections`: the connections open now are reset; new ones go through.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

struct State {
    cut: Mutex<bool>,
    delay: Mutex<Duration>,
    /// Bumped to reset every connection open now.
    generation: watch::Sender<u64>,
}

pub(crate) struct Proxy {
    pub(crate) addr: SocketAddr,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    pub(crate) async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy listens");
        let addr = listener.local_addr().expect("proxy address");
        let (generation, _) = watch::channel(0);
        let state = Arc::new(State {
            cut: Mutex::new(false),
            delay: Mutex::new(Duration::ZERO),
            generation,
        });
        let accept = tokio::spawn(accept_loop(listener, target, state.clone()));
        Proxy { addr, state, accept }
    }

    /// Resets every connection and refuses new ones until [`Proxy::heal`].
    pub(crate) fn cut(&self) {
        *self.state.cut.lock().unwrap() = true;
        self.drop_connections();
    }

    pub(crate) fn heal(&self) {
        *self.state.cut.lock().unwrap() = false;
    }

    /// Every round trip takes `by` more from now on (zero: none).
    pub(crate) fn delay(&self, by: Duration) {
        *self.state.delay.lock().unwrap() = by;
    }

    /// Resets the connections open now.
    pub(crate) fn drop_connections(&self) {
        self.state.generation.send_modify(|g| *g += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.drop_connections();
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, state: Arc<State>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if *state.cut.lock().unwrap() {
            reset(client);
            continue;
        }
        let state = state.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(target).await else {
                reset(client);
                return;
            };
            let mut generation = state.generation.subscribe();
            generation.mark_unchanged();
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let to_server = tokio::spawn(delayed_pump(client_read, server_write, state.clone()));
            let to_client = tokio::spawn(pump(server_read, client_write));
            tokio::select! {
                _ = generation.changed() => {}
                _ = wait_both(&to_server, &to_client) => {}
            }
            // Dropping the halves closes both sockets (a reset where data was still unread).
            to_server.abort();
            to_client.abort();
        });
    }
}

async fn wait_both(a: &tokio::task::JoinHandle<()>, b: &tokio::task::JoinHandle<()>) {
    while !(a.is_finished() && b.is_finished()) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Closes a connection with a reset, as a failed network path does. (A zero linger does not
/// block on drop, which is what the deprecation warns of.)
#[expect(deprecated, reason = "SO_LINGER 0 is how a reset is sent; it never blocks")]
fn reset(stream: TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

async fn pump(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Forwards what the node sends, each piece `delay` after it came: a delay line (a reader and
/// a writer), so that a delay slows each round trip without limiting the throughput.
async fn delayed_pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    state: Arc<State>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let due = tokio::time::Instant::now() + *state.delay.lock().unwrap();
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(reader, writer);
}
