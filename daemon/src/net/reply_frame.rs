//! One reply as the connection writes it: a head (the reply header and
//! whatever body was built for it) and, for polls, the stored records lent
//! from a partition's read window. Written with one vectored write, so the
//! records go from the buffer the disk read filled to the socket without a
//! copy in user space. This file owns only that pairing; it encodes nothing.

use crate::storage::SharedSlice;

/// The bytes of one reply: `head` then `tail`.
#[derive(Debug)]
pub struct ReplyFrame {
    head: Vec<u8>,
    tail: Option<SharedSlice>,
    /// `head` and `tail` as the kernel sees them; both point into heap
    /// memory that does not move while the frame lives.
    iovecs: [libc::iovec; 2],
}

impl ReplyFrame {
    pub fn new(head: Vec<u8>, tail: Option<SharedSlice>) -> ReplyFrame {
        let tail = tail.filter(|tail| !tail.is_empty());
        let head_iovec = libc::iovec {
            iov_base: head.as_ptr().cast_mut().cast(),
            iov_len: head.len(),
        };
        let tail_iovec = match &tail {
            Some(tail) => libc::iovec {
                iov_base: tail.as_slice().as_ptr().cast_mut().cast(),
                iov_len: tail.len(),
            },
            None => libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            },
        };
        ReplyFrame {
            head,
            tail,
            iovecs: [head_iovec, tail_iovec],
        }
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.tail.as_ref().map_or(0, SharedSlice::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
}

impl From<Vec<u8>> for ReplyFrame {
    fn from(head: Vec<u8>) -> ReplyFrame {
        ReplyFrame::new(head, None)
    }
}

// SAFETY: the iovecs point at `head`'s heap buffer and at the shared
// buffer `tail` keeps alive; neither moves or changes while the frame is
// owned by a write, and the count names only initialised iovecs.
unsafe impl monoio::buf::IoVecBuf for ReplyFrame {
    fn read_iovec_ptr(&self) -> *const libc::iovec {
        self.iovecs.as_ptr()
    }

    fn read_iovec_len(&self) -> usize {
        if self.tail.is_some() { 2 } else { 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::AlignedBuf;

    // The parts concatenate to the reply; an empty tail is dropped.
    #[test]
    fn head_and_tail_make_the_reply() {
        let mut buf = AlignedBuf::with_capacity(16);
        buf.extend_from_slice(b"0123456789");
        let shared = SharedSlice::new(std::sync::Arc::new(buf), 2..6);
        let frame = ReplyFrame::new(b"head".to_vec(), Some(shared));
        assert_eq!(frame.to_vec(), b"head2345");
        assert_eq!(frame.len(), 8);
        assert_eq!(monoio::buf::IoVecBuf::read_iovec_len(&frame), 2);
        let plain = ReplyFrame::from(b"x".to_vec());
        assert_eq!(monoio::buf::IoVecBuf::read_iovec_len(&plain), 1);
        assert_eq!(plain.to_vec(), b"x");
    }
}
