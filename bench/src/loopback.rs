//! Raw loopback TCP baselines measured in the same run as iggyd: the same
//! frames over the same kind of socket, with a trivial peer that does no
//! work beyond reading and answering.
//!
//! * [`lockstep`]: each client connection writes a request frame and waits
//!   for a reply frame of a fixed size, one in flight, exactly the shape of
//!   the Iggy protocol. With a batch-sized request and a small reply it is
//!   the baseline for producers; with a poll-sized request and a batch-sized
//!   reply it is the baseline for consumers.
//! * [`one_way`]: each connection streams frames without waiting (a pure
//!   copy); an upper bound on what loopback TCP can move.
//! * [`lockstep`] with a [`Sink`]: the peer also appends every request
//!   body to a file of its own (buffered `write`) before answering, and
//!   with `sync` also fdatasyncs it: the least any server that stores (and,
//!   synced, makes durable) what it receives must do, measured on the same
//!   disk as the daemon's data.
//!
//! This file owns the peer threads and sockets; timing and stopping are the
//! shared driver's (`load::drive`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;

use crate::load::{Aggregate, Stop, Work, drive};

use iggyd_wire::protocol::header::{COMMAND_AT, SIZE_AT};
use iggyd_wire::protocol::limits::HEADER_SIZE;

/// A frame of `len` bytes (≥ 256) whose header `size` field says `len`.
pub fn frame_of_len(len: usize) -> Vec<u8> {
    assert!(len >= HEADER_SIZE);
    let mut frame = vec![0u8; len];
    frame[SIZE_AT..SIZE_AT + 4].copy_from_slice(&(len as u32).to_le_bytes());
    frame[COMMAND_AT] = 8;
    frame
}

/// Reads one frame (header, then `size - 256` body bytes) into `buffer`.
fn read_frame(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut header = [0u8; HEADER_SIZE];
    match stream.read_exact(&mut header) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(error) => return Err(error),
    }
    let size = u32::from_le_bytes(header[SIZE_AT..SIZE_AT + 4].try_into().expect("4 bytes"));
    let body = (size as usize).saturating_sub(HEADER_SIZE);
    buffer.resize(body, 0);
    stream.read_exact(buffer)?;
    Ok(true)
}

/// Where a lockstep peer stores what it receives.
#[derive(Debug, Clone, Copy)]
pub struct Sink<'a> {
    pub dir: &'a Path,
    /// fdatasync after every write (the `persisted` baseline).
    pub sync: bool,
}

/// A listener whose connections each answer every frame with `reply`
/// (or nothing, for one-way), after appending its body to a file in `sink`
/// (and syncing it, when asked) when given. Threads end when their client
/// disconnects.
fn peer(
    connections: usize,
    reply: Option<Arc<Vec<u8>>>,
    sink: Option<Sink<'_>>,
) -> std::io::Result<SocketAddr> {
    let sync = sink.is_some_and(|sink| sink.sync);
    let sink = sink.map(|sink| sink.dir.to_path_buf());
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    std::thread::Builder::new()
        .name("loopback-accept".into())
        .spawn(move || {
            for connection in 0..connections {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                let _ = stream.set_nodelay(true);
                let reply = reply.clone();
                let mut file = match &sink {
                    Some(dir) => {
                        match std::fs::File::create(dir.join(format!("raw-{connection}.log"))) {
                            Ok(file) => Some(file),
                            Err(_) => return,
                        }
                    }
                    None => None,
                };
                let _ = std::thread::Builder::new()
                    .name("loopback-peer".into())
                    .spawn(move || {
                        let mut buffer = Vec::with_capacity(2 * 1024 * 1024);
                        while let Ok(true) = read_frame(&mut stream, &mut buffer) {
                            if let Some(file) = file.as_mut()
                                && (file.write_all(&buffer).is_err()
                                    || (sync && file.sync_data().is_err()))
                            {
                                return;
                            }
                            if let Some(reply) = &reply
                                && stream.write_all(reply).is_err()
                            {
                                return;
                            }
                        }
                    });
            }
        })?;
    Ok(address)
}

/// Request/response lockstep: `connections` clients each send `request` and
/// read a `reply_len`-byte reply, until `stop`. Each exchange counts
/// `payload_bytes` and `messages` (the caller's accounting, so ratios to
/// iggyd compare like with like). With `sink`, the peer appends each body
/// to a file in that directory first (the files are left for the caller).
pub fn lockstep(
    connections: usize,
    request: &[u8],
    reply_len: usize,
    payload_bytes: u64,
    messages: u64,
    stop: Stop,
    sink: Option<Sink<'_>>,
) -> Result<Aggregate, String> {
    let address = peer(connections, Some(Arc::new(frame_of_len(reply_len))), sink)
        .map_err(|error| format!("loopback peer: {error}"))?;
    let works = client_works(address, connections, |mut stream| {
        let request = request.to_vec();
        let mut buffer = Vec::with_capacity(reply_len);
        Box::new(move || {
            stream
                .write_all(&request)
                .map_err(|error| error.to_string())?;
            if !read_frame(&mut stream, &mut buffer).map_err(|error| error.to_string())? {
                return Err("loopback peer closed".into());
            }
            Ok(Some((payload_bytes, messages)))
        })
    })?;
    drive(works, stop, None, true)
}

/// One-way stream: `connections` clients write `frame` back to back until
/// `stop`; the peer reads and discards.
pub fn one_way(
    connections: usize,
    frame: &[u8],
    payload_bytes: u64,
    messages: u64,
    stop: Stop,
) -> Result<Aggregate, String> {
    let address =
        peer(connections, None, None).map_err(|error| format!("loopback peer: {error}"))?;
    let works = client_works(address, connections, |mut stream| {
        let frame = frame.to_vec();
        Box::new(move || {
            stream
                .write_all(&frame)
                .map_err(|error| error.to_string())?;
            Ok(Some((payload_bytes, messages)))
        })
    })?;
    drive(works, stop, None, false)
}

/// Opens `connections` client connections to the peer at `address` (Nagle
/// off, as the daemon's clients) and makes each one's work with `work_of`.
fn client_works(
    address: SocketAddr,
    connections: usize,
    mut work_of: impl FnMut(TcpStream) -> Work,
) -> Result<Vec<Work>, String> {
    (0..connections)
        .map(|_| {
            let stream = TcpStream::connect(address).map_err(|error| error.to_string())?;
            stream
                .set_nodelay(true)
                .map_err(|error| error.to_string())?;
            Ok(work_of(stream))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Both baselines move the bytes they claim: a few exchanges of small
    // frames complete and are counted per request.
    #[test]
    fn lockstep_and_one_way_count_requests() {
        let request = frame_of_len(256 + 1000);
        let lock = lockstep(2, &request, 280, 1000, 1, Stop::Requests(50), None).unwrap();
        assert_eq!(lock.requests, 100);
        assert_eq!(lock.throughput.bytes, 100_000);
        assert_eq!(lock.latency.count, 100);
        let stream = one_way(1, &request, 1000, 1, Stop::Requests(20)).unwrap();
        assert_eq!(stream.throughput.messages, 20);
        let dir = tempfile::tempdir().unwrap();
        let stored = lockstep(
            1,
            &request,
            280,
            1000,
            1,
            Stop::Requests(10),
            Some(Sink {
                dir: dir.path(),
                sync: true,
            }),
        );
        assert_eq!(stored.unwrap().requests, 10);
        let written = std::fs::metadata(dir.path().join("raw-0.log"))
            .unwrap()
            .len();
        assert_eq!(written, 10 * 1000);
    }
}
