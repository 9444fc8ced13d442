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
pub fn serve(
    context: std::rc::Rc<crate::shard::context::ShardContext>,
    listener: std::net::TcpListener,
    stop: flume::Receiver<()>,
) -> std::io::Result<impl Future<Output = ()>> {
    let listener = monoio::net::TcpListener::from_std(listener)?;
    let shard = context.shard;
    Ok(async move {
        let mut accepted: u64 = 0;
        loop {
            monoio::select! {
                _ = stop.recv_async() => break,
                result = listener.accept() => match result {
                    Ok((stream, peer)) => {
                        accepted += 1;
                        tracing::debug!(shard, %peer, accepted, "connection accepted");
                        // Replies are written whole; Nagle would only delay them.
                        let _ = stream.set_nodelay(true);
                        monoio::spawn(super::connection::serve(context.clone(), stream, peer));
                    }
                    Err(error) => {
                        // EMFILE and friends: log and keep serving; the
                        // listener itself stays valid.
                        tracing::warn!(shard, %error, "accept failed");
                        monoio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                },
            }
        }
        drop(listener);
    })
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
