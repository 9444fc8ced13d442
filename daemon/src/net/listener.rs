//! Listener sockets: the supervisor binds one socket per shard on
//! `tcp.address` with `SO_REUSEPORT` before any shard starts (so a busy port
//! is a start-up error, and port 0 resolves to one port shared by all
//! shards); each shard then accepts on its own socket, so the kernel spreads
//! connections across shards. This module does not speak the protocol.
//!
//! Each accepted connection becomes its own task on the shard
//! (`net::connection`); a slow client only ever slows its own task. A
//! connection over the caps of `net::admission` is closed as soon as it is
//! accepted, before any byte is read.

use crate::limits;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;

/// Bind `count` listening sockets on `address` with `SO_REUSEPORT`. Returns
/// the address actually bound (port 0 resolved) and the sockets.
pub fn bind_all(
    address: SocketAddr,
    count: usize,
) -> std::io::Result<(SocketAddr, Vec<std::net::TcpListener>)> {
    assert!(count > 0);
    let mut bound = address;
    let mut listeners = Vec::with_capacity(count);
    for _ in 0..count {
        let listener = bind_one(bound)?;
        if bound.port() == 0 {
            bound = listener.local_addr()?;
        }
        listeners.push(listener);
    }
    Ok((bound, listeners))
}

/// One non-blocking listening socket on `address` with `SO_REUSEPORT`, as
/// each shard's is (port 0: the kernel picks one).
pub fn bind_one(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.set_cloexec(true)?;
    socket.bind(&address.into())?;
    socket.listen(limits::LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// Register `listener` with the current shard's runtime and return the accept
/// loop, which runs until `stop` fires (or its sender is dropped).
///
/// Stopping is careful not to reset clients: the loop stops accepting, takes
/// every connection already waiting in the kernel's queue (they completed
/// their handshake and expect an answer), serves them like any other, and
/// only then shuts the listening socket down — synchronously, so it leaves
/// the `SO_REUSEPORT` group before the process exits and a restarted daemon
/// never shares the port with a lingering socket. New attempts after that
/// are refused cleanly.
///
/// When the service manager keeps the listening socket across a restart
/// (`Net::hand_over`), stopping only stops accepting: the socket keeps
/// listening, unfiltered, and whatever connects meanwhile waits in its
/// queue for the next process (`fdstore`).
pub fn serve(
    context: std::rc::Rc<crate::net::context::NetContext>,
    listener: std::net::TcpListener,
    stop: flume::Receiver<()>,
) -> std::io::Result<impl Future<Output = ()>> {
    let listener = monoio::net::TcpListener::from_std(listener)?;
    let shard = context.shard;
    Ok(async move {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
        let mut accepted: u64 = 0;
        // Readiness, then non-blocking accept4: an io_uring accept that
        // completes just as it is cancelled would hand back a connection
        // nobody serves (the client sees a reset); a cancelled readiness
        // poll loses nothing.
        loop {
            monoio::select! {
                _ = stop.recv_async() => break,
                ready = listener.readable(false) => {
                    if let Err(error) = ready {
                        tracing::warn!(shard, %error, "listener readiness failed");
                        monoio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                    accepted += serve_backlog(&context, fd).await;
                }
            }
        }
        context.net.accepting.stopped();
        if context.net.hand_over {
            drop(listener);
            context.listener_closed();
            tracing::debug!(
                shard,
                accepted,
                "stopped accepting; the socket stays listening for the next process"
            );
            return;
        }
        // Stop taking new handshakes without resetting any: a socket filter
        // drops bare SYNs (the client retransmits, and then meets a refusal
        // or the restarted daemon), handshakes already under way complete
        // into the queue during a short settle, and every queued connection
        // is taken and served. Only then is the socket shut down, so nothing
        // that completed a handshake is ever reset.
        match drop_new_handshakes(fd) {
            Ok(()) => monoio::time::sleep(crate::limits::HANDSHAKE_SETTLE).await,
            // Some kernels refuse socket filters to processes without
            // privileges (the shipped unit runs with none): the queued
            // connections are still served below, only a handshake that
            // completes between the sweep and the shutdown is reset, and
            // the client retries. Nothing for an operator to fix.
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
                tracing::info!(
                    shard,
                    %error,
                    "the kernel refused the stop-time socket filter to this unprivileged process; queued connections are served, new handshakes are not held back"
                )
            }
            Err(error) => {
                tracing::warn!(shard, %error, "cannot filter new handshakes while stopping")
            }
        }
        let (served, error) = sweep_backlog(fd, |stream, peer| serve_one(&context, stream, peer));
        // SAFETY: `fd` is the listener's open descriptor; shutdown does not
        // close it (the drop below does).
        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        if let Some(error) = error {
            tracing::warn!(shard, %error, "accept failed while stopping");
        }
        accepted += served;
        drop(listener);
        context.listener_closed();
        tracing::debug!(shard, accepted, "listener closed");
    })
}

/// Attach a classic BPF socket filter to the listening socket `fd` that
/// drops bare SYNs (SYN set, ACK clear) and lets everything else through, so
/// the handshakes already under way can complete while no new one starts.
/// The filter runs with the packet's TCP header at offset 0; byte 13 holds
/// the flags.
fn drop_new_handshakes(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    const TCP_FLAGS_AT: u32 = 13;
    const SYN: u32 = 0x02;
    const SYN_OR_ACK: u32 = 0x12;
    let program = [
        // A = tcp_header[13]
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: TCP_FLAGS_AT,
        },
        // A &= SYN | ACK
        libc::sock_filter {
            code: (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: SYN_OR_ACK,
        },
        // if A == SYN: drop, else: accept
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: SYN,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: u32::MAX,
        },
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `fd` is an open socket; `fprog` points at `program`, which
    // outlives the call (the kernel copies it).
    let result = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            std::ptr::from_ref(&fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Accept every connection waiting on `fd` and start serving each; returns
/// how many.
async fn serve_backlog(
    context: &std::rc::Rc<crate::net::context::NetContext>,
    fd: std::os::fd::RawFd,
) -> u64 {
    let (served, error) = sweep_backlog(fd, |stream, peer| serve_one(context, stream, peer));
    if let Some(error) = error {
        if let Some(suppressed) = context.notice("accept-failed") {
            tracing::warn!(shard = context.shard, %error, suppressed, "accept failed");
        }
        monoio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    served
}

/// Admit one accepted connection and start serving it, or close it at once
/// (before any byte is read) when it is over a cap of `net::admission`;
/// true when it is served.
fn serve_one(
    context: &std::rc::Rc<crate::net::context::NetContext>,
    stream: std::net::TcpStream,
    peer: SocketAddr,
) -> bool {
    let ticket = match context.net.admission.admit(peer.ip(), context.partitions()) {
        Ok(ticket) => ticket,
        Err(refusal) => {
            drop(stream);
            if let Some(suppressed) = context.notice("connection-refused") {
                tracing::warn!(
                    shard = context.shard,
                    %peer,
                    suppressed,
                    "refused a connection: {refusal}"
                );
            }
            return false;
        }
    };
    match monoio::net::TcpStream::from_std(stream) {
        Ok(stream) => {
            // Replies are written whole; Nagle would only delay them.
            let _ = stream.set_nodelay(true);
            let client_id = context.register_client(peer);
            tracing::debug!(shard = context.shard, %peer, client_id, "connection accepted");
            monoio::spawn(super::connection::serve(
                context.clone(),
                stream,
                peer,
                client_id,
                ticket,
            ));
            true
        }
        Err(error) => {
            tracing::warn!(shard = context.shard, %peer, %error, "cannot serve an accepted connection");
            false
        }
    }
}

/// Take every connection waiting in the accept queue of the (non-blocking)
/// listening socket `fd`, without waiting for more, handing each to `take`
/// as soon as it is accepted: a burst never holds more descriptors than
/// `take` keeps (refused ones are closed before the next accept). Returns
/// how many `take` kept, and the error that stopped the sweep, if any.
fn sweep_backlog(
    fd: std::os::fd::RawFd,
    mut take: impl FnMut(std::net::TcpStream, SocketAddr) -> bool,
) -> (u64, Option<std::io::Error>) {
    use std::os::fd::FromRawFd;
    let mut kept = 0;
    loop {
        // SAFETY: `fd` is a valid listening socket; null address pointers
        // are allowed by accept4.
        let accepted = unsafe {
            libc::accept4(
                fd,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if accepted < 0 {
            let error = std::io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNABORTED) => {}
                // EMFILE, ENFILE, ENOBUFS...: the listener stays valid; say
                // so, and let the caller back off instead of spinning.
                _ => return (kept, Some(error)),
            }
            if error.raw_os_error() == Some(libc::EAGAIN) {
                break;
            }
            continue;
        }
        // SAFETY: accept4 returned a new descriptor that we now own.
        let stream = unsafe { std::net::TcpStream::from_raw_fd(accepted) };
        match stream.peer_addr() {
            Ok(peer) => kept += u64::from(take(stream, peer)),
            Err(_) => drop(stream),
        }
    }
    (kept, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_zero_resolves_once_and_every_socket_shares_it() {
        let (bound, listeners) = bind_all("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        assert_ne!(bound.port(), 0);
        for listener in &listeners {
            assert_eq!(listener.local_addr().unwrap(), bound);
        }
    }

    #[test]
    fn a_port_held_without_reuseport_is_an_error() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = holder.local_addr().unwrap();
        assert!(bind_all(taken, 1).is_err());
    }
}
