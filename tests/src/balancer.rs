//! A TCP load balancer on 127.0.0.1 for tests of hub replicas: what a real deployment puts in front
//! of the replicas' gRPC listeners (TLS passes through untouched). Each new connection goes to the
//! backend with the fewest open connections (ties in turn), skipping a backend that refuses the
//! connection, so a killed replica's agents land on the others when they reconnect.
//!
//! It runs on a thread of its own, independent of the test's runtime, until dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct Backend {
    addr: SocketAddr,
    open: Arc<AtomicUsize>,
}

#[derive(Debug, Default)]
struct State {
    backends: Vec<Backend>,
    next: usize,
}

/// A running balancer; stopped (with every proxied connection) when dropped.
#[derive(Debug)]
pub struct Balancer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Balancer {
    /// Listens on a free port of 127.0.0.1 with no backends yet (connections are closed until
    /// [`Balancer::set_backends`]).
    pub fn start() -> anyhow::Result<Self> {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("binding the balancer")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let stop = CancellationToken::new();
        let thread = {
            let state = state.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("balancer".into())
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    let Ok(runtime) = runtime else {
                        return;
                    };
                    runtime.block_on(async move {
                        let Ok(listener) = TcpListener::from_std(listener) else {
                            return;
                        };
                        serve(listener, state, stop).await;
                    });
                })
                .context("starting the balancer thread")?
        };
        Ok(Self {
            addr,
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// Where clients connect: `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the backends (open connections stay where they are).
    pub fn set_backends(&self, backends: &[SocketAddr]) {
        let mut state = lock(&self.state);
        state.backends = backends
            .iter()
            .map(|addr| Backend {
                addr: *addr,
                open: Arc::new(AtomicUsize::new(0)),
            })
            .collect();
        state.next = 0;
    }

    /// Open proxied connections per backend.
    pub fn open_connections(&self) -> Vec<(SocketAddr, usize)> {
        lock(&self.state)
            .backends
            .iter()
            .map(|b| (b.addr, b.open.load(Ordering::SeqCst)))
            .collect()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(listener: TcpListener, state: Arc<Mutex<State>>, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((client, _)) = accepted else {
            continue;
        };
        let state = state.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let Some((upstream, open)) = connect(&state).await else {
                return;
            };
            let guard = OpenGuard(open);
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (mut client, mut upstream) = (client, upstream);
            tokio::select! {
                () = stop.cancelled() => {}
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
            }
            drop(guard);
        });
    }
}

struct OpenGuard(Arc<AtomicUsize>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Connects to the least busy backend that accepts, counting the connection as open there.
async fn connect(state: &Mutex<State>) -> Option<(TcpStream, Arc<AtomicUsize>)> {
    let candidates: Vec<(SocketAddr, Arc<AtomicUsize>)> = {
        let mut state = lock(state);
        let n = state.backends.len();
        if n == 0 {
            return None;
        }
        let start = state.next % n;
        state.next = state.next.wrapping_add(1);
        let mut order: Vec<usize> = (0..n).map(|i| (start + i) % n).collect();
        // Stable: among equally busy backends the turn order stays.
        order.sort_by_key(|&i| state.backends[i].open.load(Ordering::SeqCst));
        order
            .into_iter()
            .map(|i| (state.backends[i].addr, state.backends[i].open.clone()))
            .collect()
    };
    for (addr, open) in candidates {
        // Counted before connecting, so simultaneous connections spread out.
        open.fetch_add(1, Ordering::SeqCst);
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Some((stream, open)),
            _ => {
                open.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A backend that answers every connection with its own name and keeps it open.
    async fn named_backend(name: &'static str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                let _ = stream.write_all(name.as_bytes()).await;
                held.push(stream);
            }
        });
        (addr, task)
    }

    async fn who(addr: SocketAddr) -> (String, TcpStream) {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let mut buf = [0u8; 1];
        stream.read_exact(&mut buf).await.expect("read");
        (String::from_utf8_lossy(&buf).into_owned(), stream)
    }

    #[tokio::test]
    async fn spreads_connections_and_skips_a_dead_backend() {
        let (a, _a_task) = named_backend("a").await;
        let (b, b_task) = named_backend("b").await;
        let balancer = Balancer::start().expect("start");
        balancer.set_backends(&[a, b]);
        let mut held = Vec::new();
        let mut names = Vec::new();
        for _ in 0..4 {
            let (name, stream) = who(balancer.addr()).await;
            names.push(name);
            held.push(stream);
        }
        names.sort();
        assert_eq!(names, ["a", "a", "b", "b"]);

        // b dies: its port refuses connections, so everything new goes to a.
        b_task.abort();
        let _ = b_task.await;
        for _ in 0..3 {
            let (name, stream) = who(balancer.addr()).await;
            assert_eq!(name, "a");
            held.push(stream);
        }
    }
}
