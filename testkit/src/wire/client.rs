//! A blocking client for one connection: one request in flight (the
//! protocol's lockstep, §2.1), a random non-zero client id, the session
//! number after login and the request counter of replicated operations,
//! stamped the way the SDK stamps them. Tests use it next to raw and
//! hostile traffic; the load generator uses it to measure, which is why a
//! reply lands in a buffer the connection reuses and why a SendMessages
//! frame can be built once (`SendFrame`) and sent again with only its
//! request number patched.
//!
//! The connection is plaintext or TLS (`connect_tls`, rustls over the same
//! blocking socket); everything above the byte stream is the same.
//!
//! It reports every failure as a `ClientError` and never times anything.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use super::request::{Identifier, OptionEntry, Request};
use super::{
    COMMAND_EVICTION, COMMAND_REPLY, REPLY_TIMEOUT, Reply, is_replicated, read_frame_into,
};

/// Byte offset of the request number in a request header (§2.3).
const REQUEST_NUMBER_AT: usize = 168;

/// What can go wrong talking to the server.
#[derive(Debug)]
pub enum ClientError {
    Io(io::Error),
    /// The server closed the connection instead of answering.
    Closed,
    /// A non-zero status (or a result-section rejection) for `code`.
    Status {
        code: u32,
        status: u32,
    },
    /// The server evicted the session (§2.6).
    Evicted {
        reason: u8,
    },
    /// The reply did not have the expected shape.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(error) => write!(f, "I/O error: {error}"),
            ClientError::Closed => write!(f, "the server closed the connection"),
            ClientError::Status { code, status } => {
                write!(f, "command {code} failed with status {status}")
            }
            ClientError::Evicted { reason } => write!(f, "evicted by the server (reason {reason})"),
            ClientError::Protocol(reason) => write!(f, "protocol error: {reason}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(error: io::Error) -> Self {
        ClientError::Io(error)
    }
}

/// A complete SendMessages request frame, built once and sent over and over
/// (the server stamps offsets; the bytes never change except for the
/// request number, and partition operations carry no checksum).
#[derive(Debug, Clone)]
pub struct SendFrame {
    pub bytes: Vec<u8>,
    pub messages: u32,
}

/// The byte stream under a client: the socket, or TLS over it.
enum Transport {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(stream) => stream.read(buf),
            Transport::Tls(stream) => stream.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(stream) => stream.write(buf),
            Transport::Tls(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(stream) => stream.flush(),
            Transport::Tls(stream) => stream.flush(),
        }
    }
}

/// One connection in lockstep.
pub struct Client {
    stream: Transport,
    client: u128,
    session: u64,
    /// The request number of the next replicated request (§2.3).
    next_request: u64,
    /// The last reply; its body is reused from one request to the next.
    reply: Reply,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client", &self.client)
            .field("session", &self.session)
            .finish()
    }
}

/// A client id: random enough for tests and benchmarks (the clock, the
/// process id and a counter), never zero.
fn client_id() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    (now << 32) ^ (u128::from(std::process::id()) << 16) ^ u128::from(counter) | 1
}

impl Client {
    /// Connects (no login yet), with `REPLY_TIMEOUT` on reads and writes
    /// and Nagle off.
    pub fn connect(address: SocketAddr) -> io::Result<Client> {
        Ok(Client::over(Transport::Plain(Client::socket(address)?)))
    }

    /// A client on a stream the caller connected (from a chosen source
    /// address, say); Nagle off, timeouts as the caller set them.
    pub fn from_stream(stream: TcpStream) -> Client {
        let _ = stream.set_nodelay(true);
        Client::over(Transport::Plain(stream))
    }

    /// Connects over TLS with `config` (see `crate::tls::client_config`),
    /// naming the server `server_name`, and completes the handshake before
    /// returning (no login yet).
    pub fn connect_tls(
        address: SocketAddr,
        config: Arc<rustls::ClientConfig>,
        server_name: &str,
    ) -> io::Result<Client> {
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
        let connection = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(connection, Client::socket(address)?);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(Client::over(Transport::Tls(Box::new(stream))))
    }

    /// The TLS session of a `connect_tls` client.
    pub fn tls_connection(&self) -> Option<&rustls::ClientConnection> {
        match &self.stream {
            Transport::Plain(_) => None,
            Transport::Tls(stream) => Some(&stream.conn),
        }
    }

    fn socket(address: SocketAddr) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(address)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
        Ok(stream)
    }

    fn over(stream: Transport) -> Client {
        Client {
            stream,
            client: client_id(),
            session: 0,
            next_request: 1,
            reply: Reply {
                header: [0; super::HEADER_SIZE],
                body: Vec::with_capacity(64 * 1024),
            },
        }
    }

    /// Connects and logs in.
    pub fn login_to(
        address: SocketAddr,
        username: &str,
        password: &str,
    ) -> Result<Client, ClientError> {
        let mut client = Client::connect(address)?;
        client.login(username, password)?;
        Ok(client)
    }

    /// The session number (0 before login).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// The socket under the connection (under TLS too), for tools that
    /// look at or shut down the connection themselves.
    pub fn socket_mut(&mut self) -> &mut TcpStream {
        match &mut self.stream {
            Transport::Plain(stream) => stream,
            Transport::Tls(stream) => &mut stream.sock,
        }
    }

    /// The last reply read.
    pub fn last_reply(&self) -> &Reply {
        &self.reply
    }

    /// Sends `request` with this session's header and reads one frame back
    /// (a reply or an eviction), whatever its status.
    pub fn exchange(&mut self, request: &Request) -> Result<&Reply, ClientError> {
        self.send_only(request)?;
        self.read_reply()
    }

    /// Sends `request` with this session's header without reading the
    /// reply (a test that reads it in its own way, slowly say, from
    /// [`Self::socket_mut`]).
    pub fn send_only(&mut self, request: &Request) -> io::Result<()> {
        let frame = request.frame(self.client, self.session, self.next_request);
        if is_replicated(request.operation) {
            self.next_request += 1;
        }
        self.stream.write_all(&frame)
    }

    fn read_reply(&mut self) -> Result<&Reply, ClientError> {
        if !read_frame_into(&mut self.stream, &mut self.reply)? {
            return Err(ClientError::Closed);
        }
        Ok(&self.reply)
    }

    /// Like `exchange`, but only a status-0 reply is a success: returns the
    /// body after any result section.
    pub fn call(&mut self, request: &Request) -> Result<&[u8], ClientError> {
        self.exchange(request)?;
        self.accept(request.code)
    }

    fn accept(&self, code: u32) -> Result<&[u8], ClientError> {
        let reply = &self.reply;
        match reply.command() {
            COMMAND_REPLY => {}
            COMMAND_EVICTION => {
                return Err(ClientError::Evicted {
                    reason: reply.eviction_reason(),
                });
            }
            other => return Err(ClientError::Protocol(format!("reply command byte {other}"))),
        }
        if reply.status() != 0 {
            return Err(ClientError::Status {
                code,
                status: reply.status(),
            });
        }
        reply
            .payload()
            .map_err(|status| ClientError::Status { code, status })
    }

    /// Register with username and password; keeps the session. Returns the
    /// user id.
    pub fn login(&mut self, username: &str, password: &str) -> Result<u32, ClientError> {
        let body = self.call(&Request::login(username, password))?;
        // [user_id u32][session u64][...]
        let (user_id, session) = match (body.get(..4), body.get(4..12)) {
            (Some(user), Some(session)) => (
                u32::from_le_bytes(user.try_into().expect("4 bytes")),
                u64::from_le_bytes(session.try_into().expect("8 bytes")),
            ),
            _ => return Err(ClientError::Protocol("login reply too short".into())),
        };
        if session == 0 {
            return Err(ClientError::Protocol("login returned session 0".into()));
        }
        self.session = session;
        Ok(user_id)
    }

    pub fn ping(&mut self) -> Result<(), ClientError> {
        self.call(&Request::ping()).map(drop)
    }

    /// Creates a stream and returns its id.
    pub fn create_stream(&mut self, name: &str) -> Result<u32, ClientError> {
        self.call(&Request::create_stream(name, &[]))?;
        self.leading_u32("stream")
    }

    /// Creates a topic and returns its id.
    pub fn create_topic(
        &mut self,
        stream: Identifier<'_>,
        name: &str,
        partitions: u32,
        options: &[OptionEntry],
    ) -> Result<u32, ClientError> {
        self.call(&Request::create_topic(stream, partitions, name, options))?;
        self.leading_u32("topic")
    }

    /// The first u32 of the last reply's payload (the id of what a create
    /// made).
    fn leading_u32(&self, what: &str) -> Result<u32, ClientError> {
        self.reply
            .payload()
            .ok()
            .and_then(|body| body.get(..4))
            .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
            .ok_or_else(|| ClientError::Protocol(format!("{what} reply too short")))
    }

    /// Builds a frame for `request` (a SendMessages) for this session, to
    /// send with `send_prepared`.
    pub fn prepare(&self, request: &Request, messages: u32) -> SendFrame {
        SendFrame {
            bytes: request.frame(self.client, self.session, 0),
            messages,
        }
    }

    /// Sends a prepared frame (patching in the next request number) and
    /// waits for a successful acknowledgement.
    pub fn send_prepared(&mut self, frame: &mut SendFrame) -> Result<(), ClientError> {
        let request = self.next_request;
        self.next_request += 1;
        frame.bytes[REQUEST_NUMBER_AT..REQUEST_NUMBER_AT + 8]
            .copy_from_slice(&request.to_le_bytes());
        self.stream.write_all(&frame.bytes)?;
        self.read_reply()?;
        self.accept(101).map(drop)
    }
}
