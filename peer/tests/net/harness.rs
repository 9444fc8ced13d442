//! What the transport's tests share: a cluster's certificates, servers on
//! 127.0.0.1 port 0 with their counters, clients, handlers, the two monoio
//! drivers, misbehaving peers made of a plain socket (and rustls) on a
//! thread of their own, and a capture of the log lines a test produces.
//!
//! Timeouts here are failure guards only: every wait is for a real event
//! (a listener's address, a reply, a closed socket, a handler's signal).
//!
//! Must not: sleep to wait for readiness, retry, or block the runtime's
//! thread (misbehaving peers run on threads of their own).

use iggyd_peer::{
    ClusterCerts, LocalBoxFuture, PeerClient, PeerCounters, PeerFailure, PeerHandler, PeerLimits,
    PeerRequest, PeerTarget, PeerTls, ServerStop, ValidLimits,
};
use std::future::Future;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The longest any awaited event may take before the test fails.
pub const GUARD: Duration = Duration::from_secs(30);

/// A call's timeout when the test expects an answer.
pub const CALL: Duration = Duration::from_secs(20);

pub const CLUSTER: &str = "test";

/// Runs `test` on monoio's legacy (epoll) driver.
pub fn legacy<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
    install_log_capture();
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("a legacy runtime")
        .block_on(test());
}

/// Runs `test` on the io_uring driver, or skips (through the test kit,
/// which fails under CI=true) where the kernel or memlock forbid it.
pub fn io_uring<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
    install_log_capture();
    match monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
        .enable_timer()
        .build()
    {
        Ok(mut runtime) => runtime.block_on(test()),
        Err(error) => iggyd_testkit::skip(&format!("io_uring unavailable: {error}")),
    }
}

/// Declares each listed `async fn` as a test on both drivers:
/// `legacy::name` and `io_uring::name`.
#[macro_export]
macro_rules! on_both_drivers {
    ($($name:ident),* $(,)?) => {
        mod legacy {
            $(#[test] fn $name() { $crate::harness::legacy(super::$name) })*
        }
        mod io_uring {
            $(#[test] fn $name() { $crate::harness::io_uring(super::$name) })*
        }
    };
}

/// `future`, or a failed test naming `what`.
pub async fn guard<T>(what: &str, future: impl Future<Output = T>) -> T {
    match monoio::time::timeout(GUARD, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what}: no result within {GUARD:?}"),
    }
}

/// A cluster's certificates (nodes 1, 2 and 3).
pub fn cluster() -> ClusterCerts {
    ClusterCerts::generate(CLUSTER, &[1, 2, 3]).expect("cluster certificates")
}

/// Node `node`'s TLS identity.
pub fn tls(certs: &ClusterCerts, node: u64) -> PeerTls {
    let own = &certs.nodes[&node];
    PeerTls::from_pem(
        certs.ca_pem.as_bytes(),
        own.cert_pem.as_bytes(),
        own.key_pem.as_bytes(),
        node,
        certs.cluster.as_str(),
    )
    .expect("a node's TLS")
}

/// Limits for tests: production values, with timeouts short enough that
/// a test which exercises one finishes quickly.
pub fn limits() -> PeerLimits {
    PeerLimits {
        handshake_timeout: Duration::from_secs(5),
        stall_timeout: Duration::from_secs(5),
        stop_grace: Duration::from_secs(10),
        ..PeerLimits::default()
    }
}

/// A server on 127.0.0.1.
pub struct Server {
    pub address: SocketAddr,
    pub counters: Arc<PeerCounters>,
    stop: Option<ServerStop>,
    task: Option<monoio::task::JoinHandle<()>>,
}

impl Server {
    /// Serves as shard 0 of the node `tls` names, on port 0.
    pub fn start(tls: &PeerTls, limits: PeerLimits, handler: PeerHandler) -> Server {
        Server::start_at(
            "127.0.0.1:0".parse().expect("address"),
            tls,
            limits,
            handler,
        )
    }

    pub fn start_at(
        address: SocketAddr,
        tls: &PeerTls,
        limits: PeerLimits,
        handler: PeerHandler,
    ) -> Server {
        let listener = monoio::net::TcpListener::bind(address).expect("bind a listener");
        let address = listener.local_addr().expect("the listener's address");
        let counters = Arc::new(PeerCounters::default());
        let (stop, signal) = iggyd_peer::stop_signal();
        let task = monoio::spawn(iggyd_peer::serve(
            listener,
            tls.clone(),
            0,
            handler,
            limits.validate().expect("valid limits"),
            counters.clone(),
            signal,
        ));
        Server {
            address,
            counters,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Asks the server to stop and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            stop.stop();
        }
        if let Some(task) = self.task.take() {
            guard("the server's stop", task).await;
        }
    }
}

/// A client of node `node` (shard 3) calling `server` as node `target`.
pub fn client(
    tls: &PeerTls,
    target: u64,
    address: SocketAddr,
    limits: PeerLimits,
) -> (PeerClient, Arc<PeerCounters>) {
    let counters = Arc::new(PeerCounters::default());
    let client = PeerClient::new(
        tls.clone(),
        3,
        PeerTarget {
            node_id: target,
            address,
        },
        valid(limits),
        counters.clone(),
    );
    (client, counters)
}

pub fn valid(limits: PeerLimits) -> ValidLimits {
    limits.validate().expect("valid limits")
}

/// A handler from a closure returning a future.
pub fn handler<F, Fut>(handle: F) -> PeerHandler
where
    F: Fn(PeerRequest) -> Fut + 'static,
    Fut: Future<Output = Result<Vec<u8>, PeerFailure>> + 'static,
{
    Rc::new(
        move |request| -> LocalBoxFuture<'static, Result<Vec<u8>, PeerFailure>> {
            Box::pin(handle(request))
        },
    )
}

/// Answers with the request body reversed, prefixed by who called on
/// which channel: `node/shard/channel:` then the bytes.
pub fn echo() -> PeerHandler {
    handler(|request: PeerRequest| async move {
        let mut reply =
            format!("{}/{}/{}:", request.node_id, request.shard, request.channel).into_bytes();
        reply.extend(request.body.iter().rev());
        Ok(reply)
    })
}

/// What `echo` answers to `body` from node `node`, shard 3, `channel`.
pub fn echoed(node: u64, channel: u64, body: &[u8]) -> Vec<u8> {
    let mut reply = format!("{node}/3/{channel}:").into_bytes();
    reply.extend(body.iter().rev());
    reply
}

/// Runs `peer` on a thread of its own with a blocking socket connected to
/// `address` (so it cannot stall the runtime that serves it), and returns
/// its outcome when it is done.
pub async fn misbehave<T: Send + 'static>(
    address: SocketAddr,
    peer: impl FnOnce(std::net::TcpStream) -> T + Send + 'static,
) -> T {
    let (done, outcome) = flume::bounded(1);
    std::thread::spawn(move || {
        let stream = std::net::TcpStream::connect(address).expect("connect");
        stream
            .set_read_timeout(Some(GUARD))
            .expect("a read timeout as a failure guard");
        let _ = done.send(peer(stream));
    });
    guard("a misbehaving peer", outcome.recv_async())
        .await
        .expect("the peer's thread")
}

/// Reads until the server closes the connection; how many bytes came.
/// A read timeout (the guard) fails the test: the server did not close.
pub fn read_until_closed(stream: &mut impl Read) -> usize {
    let mut total = 0;
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return total,
            Ok(count) => total += count,
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("the server did not close the connection within {GUARD:?}")
            }
            // A reset is a close too.
            Err(_) => return total,
        }
    }
}

/// Reads a TLS session until the server closes the socket (not merely
/// the session: an alert or close_notify comes first, and the server
/// counts and logs a refusal before it drops the socket).
pub fn read_until_socket_closed(
    mut stream: rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>,
) {
    read_until_closed(&mut stream);
    read_until_closed(&mut stream.sock);
}

/// A TLS session over `stream` with `config`, to the node `server`
/// (blocking, for misbehaving peers).
pub fn tls_session(
    stream: std::net::TcpStream,
    config: Arc<rustls::ClientConfig>,
    server: u64,
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    let name = rustls::pki_types::ServerName::try_from(format!("node-{server}.{CLUSTER}"))
        .expect("a server name");
    let session = rustls::ClientConnection::new(config, name).expect("a client session");
    let mut stream = rustls::StreamOwned::new(session, stream);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .expect("the TLS handshake");
    }
    stream
}

/// A hello as node `node` to node `target` of `cluster`.
pub fn hello(cluster: &str, node: u64, target: u64) -> Vec<u8> {
    iggyd_peer::hello::Hello {
        cluster: iggyd_peer::ClusterName::new(cluster).expect("a cluster name"),
        node_id: node,
        shard: 0,
        target_node_id: target,
    }
    .encode()
}

/// Sends `hello`, then reads the server's hello whole.
pub fn exchange_hellos(
    stream: &mut rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>,
    hello: &[u8],
) -> iggyd_peer::hello::Hello {
    stream.write_all(hello).expect("send the hello");
    stream.flush().expect("flush the hello");
    let mut prefix = [0u8; iggyd_peer::hello::PREFIX_BYTES];
    stream.read_exact(&mut prefix).expect("the server's hello");
    let rest = iggyd_peer::hello::Hello::remaining_after(&prefix).expect("a hello prefix");
    let mut bytes = prefix.to_vec();
    bytes.resize(prefix.len() + rest, 0);
    stream
        .read_exact(&mut bytes[prefix.len()..])
        .expect("the server's hello");
    iggyd_peer::hello::Hello::decode(&bytes).expect("the server's hello decodes")
}

/// The log lines this thread writes while the returned guard lives.
///
/// One global subscriber, installed before any test runs its code
/// (`legacy` and `io_uring` call `install_log_capture` first), writes each
/// thread's lines to that thread's own buffer while it captures. A scoped
/// subscriber per test (`tracing::subscriber::set_default`) would race
/// with other test threads over tracing's process-wide callsite interest
/// cache and lose lines now and then.
pub struct Logs {
    _not_send: std::marker::PhantomData<*const ()>,
}

thread_local! {
    /// This thread's captured lines, while it captures.
    static CAPTURED: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// Installs the capturing subscriber once per test binary; every test
/// calls it before anything it does can log.
pub fn install_log_capture() {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| LogWriter)
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    });
}

impl Logs {
    pub fn capture() -> Logs {
        CAPTURED.with(|captured| *captured.borrow_mut() = Some(Vec::new()));
        Logs {
            _not_send: std::marker::PhantomData,
        }
    }

    /// The lines so far at `level` (`WARN`, `INFO`, …).
    pub fn at(&self, level: &str) -> Vec<String> {
        let bytes = CAPTURED.with(|captured| captured.borrow().clone().unwrap_or_default());
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| line.contains(level))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        CAPTURED.with(|captured| *captured.borrow_mut() = None);
    }
}

/// Appends to the writing thread's buffer, if it captures.
struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        CAPTURED.with(|captured| {
            if let Some(lines) = captured.borrow_mut().as_mut() {
                lines.extend_from_slice(bytes);
            }
        });
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
