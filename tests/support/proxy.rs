//! A TCP relay that holds every chunk for a settable delay (plus jitter)
//! before passing it on: the latency the kernel here cannot add (no netem).
//!
//! Each direction of each connection is a reader that stamps every chunk
//! with its due time and a writer that sends it at that time. Due times
//! never decrease, so jitter delays chunks without reordering them. A
//! delay change applies to chunks read after it.
//!
//! [`Proxy::start`] dials its target in the caller's network namespace;
//! [`Proxy::start_with`] takes any dialer (e.g. one that connects from
//! inside a test network, see `net.rs`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Opens the proxy's outbound connection.
pub type Dial =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>> + Send + Sync>;

/// The delay every chunk gets: `base` plus a uniform pick in `[0, jitter)`.
#[derive(Debug, Default)]
pub struct Delay {
    base_us: AtomicU64,
    jitter_us: AtomicU64,
    seed: AtomicU64,
}

impl Delay {
    pub fn set(&self, base: Duration, jitter: Duration) {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.base_us.store(us(base), Ordering::Relaxed);
        self.jitter_us.store(us(jitter), Ordering::Relaxed);
    }

    /// The delay for the next chunk.
    fn pick(&self) -> Duration {
        let base = self.base_us.load(Ordering::Relaxed);
        let jitter = self.jitter_us.load(Ordering::Relaxed);
        let extra = if jitter == 0 {
            0
        } else {
            // xorshift64*: no need for a rand dependency in tests.
            let mut x = self
                .seed
                .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
                | 1;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D) % jitter
        };
        Duration::from_micros(base.saturating_add(extra))
    }
}

/// A running relay. Dropping it closes the listener and every connection.
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    delay: Arc<Delay>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on `listen` (port 0: any) and relays to `target`.
    ///
    /// # Errors
    /// When the listener cannot be bound.
    pub async fn start(listen: SocketAddr, target: String) -> io::Result<Proxy> {
        let dial: Dial = Arc::new(move || {
            let target = target.clone();
            Box::pin(async move { TcpStream::connect(target).await })
        });
        Proxy::start_with(listen, dial).await
    }

    /// Listens on `listen` and relays every connection to one that `dial`
    /// opens.
    ///
    /// # Errors
    /// When the listener cannot be bound.
    pub async fn start_with(listen: SocketAddr, dial: Dial) -> io::Result<Proxy> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let delay = Arc::new(Delay::default());
        delay.seed.store(
            u64::from(addr.port()) ^ u64::from(std::process::id()) << 16,
            Ordering::Relaxed,
        );
        let d = Arc::clone(&delay);
        let task = tokio::spawn(async move {
            // Owned here: aborting the accept loop aborts every connection.
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((inbound, _)) = accepted else { continue };
                        let (dial, d) = (Arc::clone(&dial), Arc::clone(&d));
                        conns.spawn(async move {
                            if let Ok(outbound) = dial().await {
                                relay(inbound, outbound, d).await;
                            }
                        });
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(Proxy { addr, delay, task })
    }

    /// Sets the delay of chunks read from now on.
    pub fn set_delay(&self, base: Duration, jitter: Duration) {
        self.delay.set(base, jitter);
    }

    /// The shared delay setting (to change it from another thread).
    pub fn delay(&self) -> Arc<Delay> {
        Arc::clone(&self.delay)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relays both directions until both are done or one fails.
async fn relay(a: TcpStream, b: TcpStream, delay: Arc<Delay>) {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let mut dirs = JoinSet::new();
    dirs.spawn(direction(ar, bw, Arc::clone(&delay)));
    dirs.spawn(direction(br, aw, delay));
    while let Some(done) = dirs.join_next().await {
        if !matches!(done, Ok(Ok(()))) {
            // One side broke: drop the other, closing both connections.
            dirs.abort_all();
        }
    }
}

/// One direction: reads chunks, writes each at its due time, then passes
/// the end of stream on.
async fn direction(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Arc<Delay>,
) -> io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    let reader = async move {
        let mut last = Instant::now();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, io::Error>(());
            }
            last = last.max(Instant::now() + delay.pick());
            if tx.send((last, buf[..n].to_vec())).is_err() {
                return Ok(());
            }
        }
    };
    tokio::pin!(reader, writer);
    let mut reading = true;
    loop {
        tokio::select! {
            // End of stream: the writer drains what is queued, then shuts
            // down. A read error ends the relay.
            r = &mut reader, if reading => {
                r?;
                reading = false;
            }
            w = &mut writer => return w,
        }
    }
}
