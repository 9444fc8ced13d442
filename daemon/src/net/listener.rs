//! Listener sockets: the supervisor binds one socket per shard on
//! `tcp.address` with `SO_REUSEPORT` before any shard starts (so a busy port
//! is a start-up error, and port 0 resolves to one port shared by all
//! shards); each shard then accepts on its own socket, so the kernel spreads
//! connections across shards. This module does not speak the protocol.
//!
//! Each accepted connection becomes its own task on the shard
//! (`net::connection`); a slow client only ever slows its own task.

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
        let socket = Socket::new(
            Domain::for_address(bound),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.set_cloexec(true)?;
        socket.bind(&bound.into())?;
        socket.listen(limits::LISTEN_BACKLOG)?;
        if bound.port() == 0 {
            bound = socket
                .local_addr()?
                .as_socket()
                .ok_or_else(|| std::io::Error::other("listener has no IP address"))?;
        }
        listeners.push(socket.into());
    }
    Ok((bound, listeners))
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
pub fn serve(
    context: std::rc::Rc<crate::shard::context::ShardContext>,
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
        // Connections already queued completed their handshake: serve them.
        accepted += serve_backlog(&context, fd).await;
        // SAFETY: `fd` is the listener's open descriptor; shutdown does not
        // close it (the drop below does).
        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        drop(listener);
        context.listener_closed();
        tracing::debug!(shard, accepted, "listener closed");
    })
}

/// Accept every connection waiting on `fd` and start serving each; returns
/// how many.
async fn serve_backlog(
    context: &std::rc::Rc<crate::shard::context::ShardContext>,
    fd: std::os::fd::RawFd,
) -> u64 {
    let (accepted, error) = sweep_backlog(fd);
    if let Some(error) = error {
        tracing::warn!(shard = context.shard, %error, "accept failed");
        monoio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mut served = 0;
    for (stream, peer) in accepted {
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
                ));
                served += 1;
            }
            Err(error) => {
                tracing::warn!(shard = context.shard, %peer, %error, "cannot serve an accepted connection");
            }
        }
    }
    served
}

/// Take every connection waiting in the accept queue of the (non-blocking)
/// listening socket `fd`, without waiting for more.
fn sweep_backlog(
    fd: std::os::fd::RawFd,
) -> (
    Vec<(std::net::TcpStream, SocketAddr)>,
    Option<std::io::Error>,
) {
    use std::os::fd::FromRawFd;
    let mut swept = Vec::new();
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
                _ => return (swept, Some(error)),
            }
            if error.raw_os_error() == Some(libc::EAGAIN) {
                break;
            }
            continue;
        }
        // SAFETY: accept4 returned a new descriptor that we now own.
        let stream = unsafe { std::net::TcpStream::from_raw_fd(accepted) };
        match stream.peer_addr() {
            Ok(peer) => swept.push((stream, peer)),
            Err(_) => drop(stream),
        }
    }
    (swept, None)
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
