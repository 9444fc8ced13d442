//! One TLS connection's I/O, shared by clients and servers: rustls driven
//! sans-I/O over the two halves of a monoio TCP stream. [`LinkReader`]
//! owns the read half and turns TLS records into frames (`frame.rs`);
//! [`LinkWriter`] owns the write half and sends frames with our own
//! write-all loop on owned buffers; [`run_writer`] is the task that feeds
//! it from a connection's bounded queue (and pings, on the client side).
//!
//! Why not monoio-rustls: a multiplexed connection reads and writes at the
//! same time, and monoio-rustls's split halves share one TLS stream through
//! an `UnsafeCell`, each holding `&mut` to it across awaits, and its read
//! half writes (an alert) on an error while the write half may be in the
//! middle of a write. Here the rustls state is a `RefCell` that is only
//! ever borrowed between awaits, never across one, and only the writer
//! writes to the socket. (And monoio's vectored-write helpers are never
//! used: see the daemon's `net/reply_frame.rs`.)
//!
//! Invariant: a read or write future is dropped before it completes only
//! when its connection ends (a timeout, an abort, a stop), because the
//! bytes such an operation moved are lost; after that nothing reads or
//! writes the stream again.
//!
//! Must not: interpret a frame beyond its layout (the client and server
//! do), wait without a bound (every read and write has the idle or stall
//! limit), or buffer more than one frame being received plus one read
//! chunk.

use crate::counters::PeerCounters;
use crate::frame::{Frame, FrameDecoder, FrameError, FrameKind, HEADER_BYTES};
use crate::limits::{FLUSH_BYTES, PLAINTEXT_STEP_BYTES, READ_CHUNK_BYTES};
use monoio::buf::IoBuf;
use monoio::io::{AsyncReadRent, AsyncWriteRent, Splitable};
use monoio::net::TcpStream;
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};
use std::cell::RefCell;
use std::io::Read;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why an established connection ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkEnd {
    #[error("the peer closed the connection")]
    PeerClosed,
    #[error("the peer closed the connection in the middle of a frame")]
    ClosedMidFrame,
    #[error("nothing arrived for {0:?}")]
    Idle(Duration),
    #[error("a frame stopped arriving midway for {0:?}")]
    ReadStalled(Duration),
    #[error("the peer took no byte for {0:?}")]
    WriteStalled(Duration),
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("{0}")]
    Protocol(String),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Closed(&'static str),
}

impl LinkEnd {
    /// The peer sent bytes that are not a valid frame for this side.
    pub(crate) fn is_garbage(&self) -> bool {
        matches!(
            self,
            LinkEnd::Frame(_) | LinkEnd::Protocol(_) | LinkEnd::Tls(_)
        )
    }

    /// The peer went silent or stopped moving.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(
            self,
            LinkEnd::Idle(_) | LinkEnd::ReadStalled(_) | LinkEnd::WriteStalled(_)
        )
    }
}

/// The rustls state both halves use, borrowed only between awaits.
type SharedTls = Rc<RefCell<rustls::Connection>>;

/// Splits `stream` into the two halves of a link speaking TLS as `tls`.
pub(crate) fn split(
    stream: TcpStream,
    tls: rustls::Connection,
    frame_bytes_max: usize,
    stall_timeout: Duration,
    counters: Arc<PeerCounters>,
) -> (LinkReader, LinkWriter) {
    let (read, write) = stream.into_split();
    let tls = Rc::new(RefCell::new(tls));
    let reader = LinkReader {
        tcp: read,
        tls: tls.clone(),
        raw: Vec::with_capacity(READ_CHUNK_BYTES),
        raw_used: 0,
        decoder: FrameDecoder::new(frame_bytes_max),
        closed: false,
        flush: None,
        counters: counters.clone(),
        received: 0,
    };
    let writer = LinkWriter {
        tcp: write,
        tls,
        out: Vec::with_capacity(FLUSH_BYTES),
        staging: Vec::with_capacity(PLAINTEXT_STEP_BYTES),
        stall_timeout,
        counters,
    };
    (reader, writer)
}

/// What a drain of rustls's plaintext found.
enum Plain {
    /// This many bytes were copied.
    Read(usize),
    /// None now; more needs more TLS records.
    Empty,
    /// The peer closed its side (cleanly or not): no more will come.
    Closed,
}

fn read_plain(tls: &mut rustls::Connection, target: &mut [u8]) -> Result<Plain, LinkEnd> {
    assert!(!target.is_empty());
    match tls.reader().read(target) {
        Ok(0) => Ok(Plain::Closed),
        Ok(count) => Ok(Plain::Read(count)),
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => Ok(Plain::Empty),
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => Ok(Plain::Closed),
        Err(error) => Err(LinkEnd::Io(error)),
    }
}

/// The receiving half.
pub(crate) struct LinkReader {
    tcp: TcpOwnedReadHalf,
    tls: SharedTls,
    /// The last socket read; `raw[raw_used..]` is not yet given to rustls.
    raw: Vec<u8>,
    raw_used: usize,
    decoder: FrameDecoder,
    /// The peer closed its side (TLS close_notify or TCP EOF).
    closed: bool,
    /// Where to ask the writer to send what rustls wants to send on its
    /// own (a key update's answer), once the writer runs as a task.
    flush: Option<flume::Sender<Outbound>>,
    counters: Arc<PeerCounters>,
    /// Bytes read from the socket so far.
    received: u64,
}

impl LinkReader {
    /// Whether the peer has sent nothing at all yet.
    pub(crate) fn received_nothing(&self) -> bool {
        self.received == 0
    }

    /// From now on, TLS messages rustls produces while reading are sent
    /// through `queue`.
    pub(crate) fn flush_through(&mut self, queue: flume::Sender<Outbound>) {
        self.flush = Some(queue);
    }

    pub(crate) fn tls<T>(&self, look: impl FnOnce(&rustls::Connection) -> T) -> T {
        look(&self.tls.borrow())
    }

    /// Reads once from the socket (within `limit`) and hands the bytes to
    /// rustls; records a TCP EOF as the peer closing.
    async fn read_socket(&mut self, limit: Option<Duration>) -> Result<(), LinkEnd> {
        debug_assert_eq!(self.raw_used, self.raw.len());
        let mut buffer = std::mem::take(&mut self.raw);
        buffer.clear();
        buffer.reserve(READ_CHUNK_BYTES);
        let read = self.tcp.read(buffer);
        let (result, buffer) = match limit {
            None => read.await,
            Some(limit) => match monoio::time::timeout(limit, read).await {
                Ok(done) => done,
                Err(_) if self.decoder.is_between_frames() => return Err(LinkEnd::Idle(limit)),
                Err(_) => return Err(LinkEnd::ReadStalled(limit)),
            },
        };
        self.raw = buffer;
        self.raw_used = 0;
        let count = match result {
            Ok(count) => count,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => return Ok(()),
            Err(error) => return Err(LinkEnd::Io(error)),
        };
        self.counters.bytes_read(count);
        self.received += count as u64;
        if count == 0 {
            // The end of the stream: tell rustls, whose plaintext reader
            // then says whether the close was clean.
            let mut tls = self.tls.borrow_mut();
            tls.read_tls(&mut &[][..])?;
            tls.process_new_packets()?;
            self.closed = true;
        }
        Ok(())
    }

    /// Gives rustls as much of the last socket read as it takes now and
    /// lets it process the records.
    fn feed(&mut self) -> Result<(), LinkEnd> {
        let mut tls = self.tls.borrow_mut();
        let mut rest = self.raw.get(self.raw_used..).unwrap_or_default();
        let before = rest.len();
        tls.read_tls(&mut rest)?;
        let taken = before - rest.len();
        self.raw_used += taken;
        let processed = tls.process_new_packets();
        if tls.wants_write()
            && let Some(queue) = &self.flush
        {
            // A full queue means the writer is busy, and it sends all that
            // rustls holds after each frame anyway.
            let _ = queue.try_send(Outbound::Flush);
        }
        processed?;
        if taken == 0 && before > 0 {
            return Err(LinkEnd::Protocol(
                "the TLS layer took no byte of a socket read".to_string(),
            ));
        }
        Ok(())
    }

    /// One step of a handshake: feed what is buffered, or read the socket
    /// once. A peer that closes mid-handshake is an error.
    pub(crate) async fn handshake_step(&mut self) -> Result<(), LinkEnd> {
        if self.raw_used < self.raw.len() {
            return self.feed();
        }
        if self.closed {
            return Err(LinkEnd::PeerClosed);
        }
        self.read_socket(None).await?;
        self.feed()
    }

    /// Fills `target` with plaintext exactly (the hello), without a limit
    /// of its own: the handshake's timeout bounds it.
    pub(crate) async fn read_exact(&mut self, target: &mut [u8]) -> Result<(), LinkEnd> {
        let mut filled = 0;
        while filled < target.len() {
            let rest = target.get_mut(filled..).unwrap_or_default();
            match read_plain(&mut self.tls.borrow_mut(), rest)? {
                Plain::Read(count) => {
                    filled += count;
                    continue;
                }
                Plain::Closed => return Err(LinkEnd::PeerClosed),
                Plain::Empty => {}
            }
            if self.raw_used < self.raw.len() {
                self.feed()?;
            } else if self.closed {
                return Err(LinkEnd::PeerClosed);
            } else {
                self.read_socket(None).await?;
            }
        }
        Ok(())
    }

    /// The next frame. Between frames the peer may stay silent for
    /// `idle`; once a frame began, each read must bring bytes within
    /// `stall`.
    pub(crate) async fn next_frame(
        &mut self,
        idle: Duration,
        stall: Duration,
    ) -> Result<Frame, LinkEnd> {
        loop {
            if let Some(frame) = self.drain_plaintext()? {
                return Ok(frame);
            }
            if self.raw_used < self.raw.len() {
                self.feed()?;
                continue;
            }
            if self.closed {
                return Err(if self.decoder.is_between_frames() {
                    LinkEnd::PeerClosed
                } else {
                    LinkEnd::ClosedMidFrame
                });
            }
            let limit = if self.decoder.is_between_frames() {
                idle
            } else {
                stall
            };
            self.read_socket(Some(limit)).await?;
        }
    }

    /// Moves decrypted bytes into the frame decoder until a frame is whole
    /// or rustls has none left.
    fn drain_plaintext(&mut self) -> Result<Option<Frame>, LinkEnd> {
        let mut tls = self.tls.borrow_mut();
        loop {
            match read_plain(&mut tls, self.decoder.unfilled())? {
                Plain::Read(count) => {
                    if let Some(frame) = self.decoder.filled(count)? {
                        return Ok(Some(frame));
                    }
                }
                Plain::Empty => return Ok(None),
                Plain::Closed => {
                    self.closed = true;
                    return Ok(None);
                }
            }
        }
    }
}

/// The sending half.
pub(crate) struct LinkWriter {
    tcp: TcpOwnedWriteHalf,
    tls: SharedTls,
    /// Encrypted bytes not yet written to the socket.
    out: Vec<u8>,
    /// A frame's header and the start of its body, joined.
    staging: Vec<u8>,
    stall_timeout: Duration,
    counters: Arc<PeerCounters>,
}

impl LinkWriter {
    /// Moves what rustls has to send into `out`.
    fn collect(&mut self) -> Result<(), LinkEnd> {
        let mut tls = self.tls.borrow_mut();
        while tls.wants_write() {
            tls.write_tls(&mut self.out)?;
        }
        Ok(())
    }

    /// Encrypts `plain` (whole), writing to the socket whenever a flush's
    /// worth is gathered.
    pub(crate) async fn push(&mut self, mut plain: &[u8]) -> Result<(), LinkEnd> {
        while !plain.is_empty() {
            let step = plain.len().min(PLAINTEXT_STEP_BYTES);
            let taken = std::io::Write::write(
                &mut self.tls.borrow_mut().writer(),
                plain.get(..step).unwrap_or_default(),
            )?;
            self.collect()?;
            if taken == 0 && self.out.is_empty() {
                return Err(LinkEnd::Protocol(
                    "the TLS layer took no plaintext and has nothing to send".to_string(),
                ));
            }
            plain = plain.get(taken..).unwrap_or_default();
            if self.out.len() >= FLUSH_BYTES || taken == 0 {
                self.write_out().await?;
            }
        }
        Ok(())
    }

    /// Encrypts one frame. The header and the start of the body go to
    /// rustls together, so a small frame is one TLS record, not two.
    pub(crate) async fn push_frame(&mut self, frame: &Frame) -> Result<(), LinkEnd> {
        let header: [u8; HEADER_BYTES] = frame.header();
        let first = frame.body.len().min(PLAINTEXT_STEP_BYTES - HEADER_BYTES);
        let (start, rest) = frame.body.split_at(first);
        let mut head = std::mem::take(&mut self.staging);
        head.clear();
        head.extend_from_slice(&header);
        head.extend_from_slice(start);
        let pushed = self.push(&head).await;
        self.staging = head;
        pushed?;
        self.push(rest).await
    }

    /// Sends everything encrypted so far and whatever rustls wants to send.
    pub(crate) async fn flush(&mut self) -> Result<(), LinkEnd> {
        self.collect()?;
        self.write_out().await
    }

    /// Ends the TLS session cleanly (close_notify) and flushes; the write
    /// half's drop shuts the socket's sending side.
    pub(crate) async fn close(mut self) -> Result<(), LinkEnd> {
        self.tls.borrow_mut().send_close_notify();
        self.flush().await
    }

    /// Writes `out` to the socket, whole: our own loop over owned buffers,
    /// each write continuing where the kernel stopped, none allowed to
    /// take no byte for longer than the stall limit.
    async fn write_out(&mut self) -> Result<(), LinkEnd> {
        let mut buffer = std::mem::take(&mut self.out);
        let mut sent = 0;
        while sent < buffer.len() {
            let write = self.tcp.write(buffer.slice(sent..));
            let (result, slice) = match monoio::time::timeout(self.stall_timeout, write).await {
                Ok(done) => done,
                Err(_) => return Err(LinkEnd::WriteStalled(self.stall_timeout)),
            };
            buffer = slice.into_inner();
            match result {
                Ok(0) => {
                    return Err(LinkEnd::Io(std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        "the socket took no byte",
                    )));
                }
                Ok(count) => {
                    sent += count;
                    self.counters.bytes_written(count);
                }
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(LinkEnd::Io(error)),
            }
        }
        buffer.clear();
        self.out = buffer;
        Ok(())
    }
}

/// What a connection's writer task is asked to send.
#[derive(Debug)]
pub(crate) enum Outbound {
    Frame(Frame),
    /// Send what rustls has queued on its own.
    Flush,
}

/// A connection's writer: sends what arrives on `queue`, packing frames
/// that are already waiting into one socket write, until every sender is
/// gone (then closes the TLS session cleanly) or `abort` fires (every
/// sender of it dropped). With `ping_every`, sends a ping that often.
/// A request frame is skipped when `wanted` says its caller gave up.
pub(crate) async fn run_writer(
    mut writer: LinkWriter,
    queue: flume::Receiver<Outbound>,
    abort: flume::Receiver<()>,
    ping_every: Option<Duration>,
    wanted: impl Fn(&Frame) -> bool,
) -> Result<(), LinkEnd> {
    let mut next_ping = ping_every.map(|every| Instant::now() + every);
    let mut ping_id = 0u64;
    loop {
        let ping_due = async {
            match next_ping {
                Some(at) => monoio::time::sleep(at.saturating_duration_since(Instant::now())).await,
                None => std::future::pending().await,
            }
        };
        let first = monoio::select! {
            item = queue.recv_async() => match item {
                Ok(item) => item,
                Err(_) => break,
            },
            _ = ping_due => {
                ping_id += 1;
                next_ping = ping_every.map(|every| Instant::now() + every);
                Outbound::Frame(Frame {
                    kind: FrameKind::Ping,
                    call_id: ping_id,
                    channel: 0,
                    body: Vec::new(),
                })
            },
            _ = abort.recv_async() => return Err(LinkEnd::Closed("the connection was closed")),
        };
        let batch = async {
            let mut item = Some(first);
            while let Some(next) = item.take() {
                if let Outbound::Frame(frame) = next
                    && wanted(&frame)
                {
                    writer.push_frame(&frame).await?;
                    if frame.kind == FrameKind::Request {
                        writer.counters.call_sent();
                    }
                }
                if writer.out.len() < FLUSH_BYTES {
                    item = queue.try_recv().ok();
                }
            }
            writer.flush().await
        };
        monoio::select! {
            done = batch => done?,
            _ = abort.recv_async() => return Err(LinkEnd::Closed("the connection was closed")),
        }
    }
    monoio::select! {
        closed = writer.close() => closed,
        _ = abort.recv_async() => Err(LinkEnd::Closed("the connection was closed")),
    }
}
