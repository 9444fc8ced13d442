//! One reply as the connection writes it: a head (the reply header and
//! whatever body was built for it) and, for polls, the stored records lent
//! from a partition's read window. Written with vectored writes, so the
//! records go from the buffer the disk read filled to the socket without a
//! copy in user space. This file owns that pairing and the write loop that
//! sends it whole; it encodes nothing.
//!
//! The loop is ours, not monoio's `write_vectored_all`: monoio 0.2.4's
//! vectored-write bookkeeping shortens a partly sent iovec without moving
//! its start, and after the first iovec is done it hands the kernel an
//! iovec count that runs past its own array. A reply larger than what the
//! socket takes at once (a few MiB) was sent with its later bytes taken
//! from the wrong place, and a count past the end could panic the shard
//! ("try to consume more than owned"). Here the frame itself tracks how
//! much is sent and describes exactly the unsent rest to each write.

use super::reply_budget::ReplyHold;
use iggyd_storage::SharedSlice;
use monoio::io::AsyncWriteRent;

/// The bytes of one reply: `head` then `tail`.
#[derive(Debug)]
pub struct ReplyFrame {
    head: Vec<u8>,
    tail: Option<SharedSlice>,
    /// Bytes the kernel has taken so far.
    sent: usize,
    /// The unsent rest of `head` and `tail` as the kernel sees it, first
    /// `live` entries valid. Boxed so the array stays put while a write
    /// owns the frame (the driver may read it after the frame moved into
    /// the operation); both point into heap memory that does not move or
    /// change while the frame lives.
    iovecs: Box<[libc::iovec; 2]>,
    live: usize,
    /// The reply's place in its shard's poll-reply budget, given back when
    /// the frame is dropped (sent, or its connection gone).
    hold: Option<ReplyHold>,
}

/// An empty iovec (unused slots).
const NO_IOVEC: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

impl ReplyFrame {
    pub fn new(head: Vec<u8>, tail: Option<SharedSlice>) -> ReplyFrame {
        let tail = tail.filter(|tail| !tail.is_empty());
        let mut frame = ReplyFrame {
            head,
            tail,
            sent: 0,
            iovecs: Box::new([NO_IOVEC; 2]),
            live: 0,
            hold: None,
        };
        frame.describe_unsent();
        frame
    }

    /// The frame keeps `hold` (its bytes in the shard's reply budget)
    /// until it is dropped.
    pub fn holding(mut self, hold: Option<ReplyHold>) -> ReplyFrame {
        self.hold = hold;
        self
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.tail.as_ref().map_or(0, SharedSlice::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes not yet taken by the kernel.
    pub fn unsent(&self) -> usize {
        self.len() - self.sent
    }

    /// The whole reply in one buffer (tests and diagnostics; the
    /// connection writes the parts).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut bytes = self.head.clone();
        if let Some(tail) = &self.tail {
            bytes.extend_from_slice(tail.as_slice());
        }
        bytes
    }

    /// Records that the kernel took `count` more bytes. A count past the
    /// end is an error (a driver that reports more than it was given),
    /// never a panic.
    fn advance(&mut self, count: usize) -> std::io::Result<()> {
        if count > self.unsent() {
            return Err(std::io::Error::other(format!(
                "a write reported {count} bytes sent of {} left",
                self.unsent()
            )));
        }
        self.sent += count;
        self.describe_unsent();
        Ok(())
    }

    /// Rebuilds `iovecs` for the bytes from `sent` on.
    fn describe_unsent(&mut self) {
        let mut parts: [&[u8]; 2] = [&self.head, &[]];
        if let Some(tail) = &self.tail {
            parts[1] = tail.as_slice();
        }
        let mut skip = self.sent;
        let mut live = 0;
        let mut iovecs = [NO_IOVEC; 2];
        for part in parts {
            let rest = part.get(skip.min(part.len())..).unwrap_or_default();
            skip = skip.saturating_sub(part.len());
            if let Some(slot) = iovecs.get_mut(live)
                && !rest.is_empty()
            {
                *slot = libc::iovec {
                    iov_base: rest.as_ptr().cast_mut().cast(),
                    iov_len: rest.len(),
                };
                live += 1;
            }
        }
        *self.iovecs = iovecs;
        self.live = live;
    }

    /// Writes the whole frame (short writes continue where the kernel
    /// stopped). The frame, and with it the read window its records are
    /// lent from, is owned by each write until the kernel is done with it,
    /// also when the connection's task is dropped meanwhile. A write that
    /// takes no byte for `stall_limit` (a client that stopped reading) ends
    /// with `TimedOut`, so a reply cannot hold its memory for ever.
    pub async fn write_all<S: AsyncWriteRent>(
        mut self,
        stream: &mut S,
        stall_limit: Option<std::time::Duration>,
    ) -> std::io::Result<()> {
        while self.unsent() > 0 {
            let write = stream.writev(self);
            let (result, frame) = match stall_limit {
                None => write.await,
                Some(limit) => monoio::select! {
                    written = write => written,
                    _ = monoio::time::sleep(limit) => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the client took no byte of its reply",
                        ));
                    }
                },
            };
            self = frame;
            match result {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        "the peer took no more bytes of a reply",
                    ));
                }
                Ok(count) => self.advance(count)?,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }
}

impl From<Vec<u8>> for ReplyFrame {
    fn from(head: Vec<u8>) -> ReplyFrame {
        ReplyFrame::new(head, None)
    }
}

// SAFETY: the first `live` iovecs describe the unsent rest of `head`'s
// heap buffer and of the shared buffer `tail` keeps alive; the array is
// boxed, so its address survives moves of the frame; neither the array nor
// the bytes change while a write owns the frame (only `advance`, between
// writes, rewrites them).
unsafe impl monoio::buf::IoVecBuf for ReplyFrame {
    fn read_iovec_ptr(&self) -> *const libc::iovec {
        self.iovecs.as_ptr()
    }

    fn read_iovec_len(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
#[path = "reply_frame_test.rs"]
mod tests;
