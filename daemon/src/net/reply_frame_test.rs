//! Tests of the reply frame and its write loop: against a stream that takes
//! a random number of bytes per write (every split of head and tail), and
//! against real sockets on both monoio drivers with a peer that reads a
//! large reply a few KiB at a time.

use super::*;
use iggyd_storage::AlignedBuf;
use iggyd_testkit::rng::Rng;
use monoio::BufResult;
use monoio::buf::{IoBuf, IoVecBuf};
use std::io::Read;
use std::sync::Arc;

fn shared(bytes: &[u8], range: std::ops::Range<usize>) -> SharedSlice {
    let mut buf = AlignedBuf::with_capacity(bytes.len());
    buf.extend_from_slice(bytes);
    SharedSlice::new(Arc::new(buf), range)
}

/// Bytes whose every position is recognisable (no run repeats within
/// 2^32 bytes), so a byte taken from the wrong place shows.
fn numbered(len: usize, salt: u32) -> Vec<u8> {
    (0..len.div_ceil(4))
        .flat_map(|word| (word as u32 ^ salt).to_le_bytes())
        .take(len)
        .collect()
}

// The parts concatenate to the reply; an empty tail is dropped.
#[test]
fn head_and_tail_make_the_reply() {
    let frame = ReplyFrame::new(b"head".to_vec(), Some(shared(b"0123456789", 2..6)));
    assert_eq!(frame.to_vec(), b"head2345");
    assert_eq!(frame.len(), 8);
    assert_eq!(frame.read_iovec_len(), 2);
    let plain = ReplyFrame::from(b"x".to_vec());
    assert_eq!(plain.read_iovec_len(), 1);
    assert_eq!(plain.to_vec(), b"x");
    let empty_tail = ReplyFrame::new(b"x".to_vec(), Some(shared(b"abc", 1..1)));
    assert_eq!(empty_tail.read_iovec_len(), 1);
}

/// A stream that takes at most a random number of bytes per write, reading
/// them through the iovecs it is given exactly as the kernel would, and
/// fails the test if an iovec count or length runs past what it was told.
struct Trickle {
    rng: Rng,
    largest: usize,
    taken: Vec<u8>,
    writes: usize,
}

impl monoio::io::AsyncWriteRent for Trickle {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        (Err(std::io::Error::other("the frame writes vectored")), buf)
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        self.writes += 1;
        let mut budget = 1 + self.rng.index(self.largest);
        let count = buf.read_iovec_len();
        assert!(count <= 2, "an iovec count past the frame's array: {count}");
        // SAFETY: the frame promises `count` valid iovecs, each pointing at
        // `iov_len` readable bytes; this is what the test checks.
        let iovecs = unsafe { std::slice::from_raw_parts(buf.read_iovec_ptr(), count) };
        let mut took = 0;
        for iovec in iovecs {
            assert!(iovec.iov_len > 0, "an empty iovec handed to the kernel");
            let step = iovec.iov_len.min(budget);
            // SAFETY: as above.
            let bytes = unsafe { std::slice::from_raw_parts(iovec.iov_base.cast::<u8>(), step) };
            self.taken.extend_from_slice(bytes);
            budget -= step;
            took += step;
            if budget == 0 {
                break;
            }
        }
        (Ok(took), buf)
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// Every way a write can stop part way (inside the head, at the boundary,
// inside the tail, a byte at a time) continues exactly where it stopped:
// the stream receives the reply byte for byte, over many seeds and sizes.
#[test]
fn short_writes_continue_where_the_kernel_stopped() {
    let mut runtime = iggyd_storage::io::test_runtime();
    for seed in 0..300u64 {
        let mut rng = Rng(seed);
        let head_len = 1 + rng.index(300);
        let body_len = rng.index(70_000);
        let start = rng.index(body_len.max(1)).min(body_len);
        let head = numbered(head_len, 0xAAAA_0000);
        let body = numbered(body_len, 0x5555_0000);
        let frame = ReplyFrame::new(head, Some(shared(&body, start..body_len)));
        let expected = frame.to_vec();
        let largest = match seed % 3 {
            0 => 1,
            1 => 97,
            _ => 1 + rng.index(80_000),
        };
        let mut stream = Trickle {
            rng: Rng(seed ^ 0xFEED),
            largest,
            taken: Vec::new(),
            writes: 0,
        };
        runtime
            .block_on(frame.write_all(&mut stream, None))
            .expect("write");
        assert!(stream.taken == expected, "seed {seed}: bytes differ");
        if largest == 1 {
            assert_eq!(stream.writes, expected.len(), "seed {seed}");
        }
    }
}

// A write that reports more than it was given is an error, not a panic.
#[test]
fn a_write_reporting_too_much_is_an_error() {
    let mut frame = ReplyFrame::new(b"abc".to_vec(), None);
    assert!(frame.advance(4).is_err());
    frame.advance(3).expect("whole");
    assert_eq!(frame.unsent(), 0);
    assert_eq!(frame.read_iovec_len(), 0);
}

/// Sends a 24 MiB reply (head + a tail lent from the middle of a larger
/// buffer) over a loopback socket whose peer reads 4 KiB at a time with
/// pauses, so the kernel takes the reply in many short writes, and
/// returns what the peer received and what was sent.
async fn send_slowly_read_reply() -> (Vec<u8>, Vec<u8>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let total_body = 25 << 20;
    let head = numbered(300, 0x1111_0000);
    let body = numbered(total_body, 0x2222_0000);
    let frame = ReplyFrame::new(head, Some(shared(&body, 4096 + 17..total_body - 5)));
    let expected = frame.to_vec();
    let expected_len = expected.len();
    let reader = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().expect("accept");
        let mut received = Vec::with_capacity(expected_len);
        let mut chunk = [0u8; 4096];
        let mut reads = 0u64;
        while received.len() < expected_len {
            let read = socket.read(&mut chunk).expect("read");
            assert!(read > 0, "closed early at {}", received.len());
            received.extend_from_slice(&chunk[..read]);
            reads += 1;
            if reads.is_multiple_of(64) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        received
    });
    let mut stream = monoio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    frame
        .write_all(&mut stream, Some(std::time::Duration::from_secs(30)))
        .await
        .expect("write reply");
    let received = reader.join().expect("reader");
    (received, expected)
}

// The reply arrives byte for byte at a slow reader on the legacy (epoll)
// driver.
#[test]
fn a_slowly_read_large_reply_arrives_whole_on_epoll() {
    let (received, expected) = iggyd_storage::io::test_runtime().block_on(send_slowly_read_reply());
    assert_eq!(received.len(), expected.len());
    assert!(received == expected, "the reply's bytes differ");
}

// The same on io_uring, the driver the daemon runs on.
#[test]
fn a_slowly_read_large_reply_arrives_whole_on_io_uring() {
    match monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
        .enable_timer()
        .build()
    {
        Ok(mut runtime) => {
            let (received, expected) = runtime.block_on(send_slowly_read_reply());
            assert_eq!(received.len(), expected.len());
            assert!(received == expected, "the reply's bytes differ");
        }
        Err(error) => iggyd_testkit::skip(&format!("io_uring unavailable: {error}")),
    }
}

// A client that stops reading cannot hold a reply for ever: once the
// kernel's buffers are full and no byte moves for the stall limit, the
// write ends with TimedOut (the connection then closes, dropping the
// frame and the window bytes it lent).
#[test]
fn a_reply_nobody_reads_times_out() {
    iggyd_storage::io::test_runtime().block_on(async {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let mut stream = monoio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        let (_silent, _) = listener.accept().expect("accept");
        let body = numbered(32 << 20, 7);
        let frame = ReplyFrame::new(b"head".to_vec(), Some(shared(&body, 0..body.len())));
        let started = std::time::Instant::now();
        let error = frame
            .write_all(&mut stream, Some(std::time::Duration::from_millis(300)))
            .await
            .expect_err("nobody reads");
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    });
}
