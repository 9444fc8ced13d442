//! Setting a connection up, both ends: TCP connect (client), the TLS
//! handshake, then the hello exchange and the identity checks, all within
//! `limits.handshake_timeout`. What comes out is an [`Established`] link
//! whose peer is known to be the node its certificate names; what does not
//! is a [`Refusal`] saying at which step and why, which the server logs
//! and counts and the client reports as the node being unreachable.
//!
//! The checks, in order. Client: the server's certificate is issued by the
//! cluster CA and valid for `node-<target>.<cluster>` (rustls), names no
//! other node (`tls::node_named_by`); the server's hello names the same
//! cluster, the target node (the one its certificate names) and this node
//! as its peer. Server: the client's certificate is issued by the cluster
//! CA (rustls); its hello names this cluster, this node as the target, and
//! the node its certificate names, exactly. The client speaks first; a
//! server that refuses closes without a hello.
//!
//! Must not: send or accept a frame (that starts once this returns), or
//! wait without the handshake timeout.

use crate::counters::{PeerCounters, Refused};
use crate::hello::{Hello, PREFIX_BYTES};
use crate::limits::ValidLimits;
use crate::link::{self, LinkEnd, LinkReader, LinkWriter};
use crate::tls::{PeerTls, node_named_by};
use monoio::net::TcpStream;
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A connection past its hello.
pub(crate) struct Established {
    pub(crate) reader: LinkReader,
    pub(crate) writer: LinkWriter,
    /// The peer's hello (its node is the one its certificate names).
    pub(crate) peer: Hello,
}

/// How far a setup got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Connect,
    Tls,
    Hello,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stage::Connect => "TCP connection",
            Stage::Tls => "TLS handshake",
            Stage::Hello => "hello",
        })
    }
}

/// Why a connection was not set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("TCP connect: {0}")]
    Connect(std::io::Error),
    #[error("TLS handshake: {0}")]
    Tls(String),
    #[error("identity: {0}")]
    Identity(String),
    #[error("hello: {0}")]
    Hello(String),
    #[error("no complete {stage} within {after:?}")]
    Timeout { stage: Stage, after: Duration },
    /// The peer closed the connection without sending a byte: a probe of
    /// the port (`iggyd cluster status` checks that it accepts), not a
    /// peer refused.
    #[error("closed before sending anything")]
    Probe,
}

impl Refusal {
    /// The counter a server adds this refusal to (none for a probe).
    pub(crate) fn counter(&self) -> Option<Refused> {
        Some(match self {
            Refusal::Probe => return None,
            Refusal::Connect(_) | Refusal::Tls(_) => Refused::Tls,
            Refusal::Timeout { stage, .. } if *stage != Stage::Hello => Refused::Tls,
            Refusal::Identity(_) => Refused::Identity,
            Refusal::Hello(_) | Refusal::Timeout { .. } => Refused::Hello,
        })
    }
}

/// Sets up a connection a server accepted.
pub(crate) async fn accept(
    stream: TcpStream,
    tls: &PeerTls,
    shard: u16,
    limits: &ValidLimits,
    counters: &Arc<PeerCounters>,
) -> Result<Established, Refusal> {
    let stage = Cell::new(Stage::Tls);
    let setup = accept_within(stream, tls, shard, limits, counters, &stage);
    match monoio::time::timeout(limits.handshake_timeout, setup).await {
        Ok(result) => result,
        Err(_) => Err(Refusal::Timeout {
            stage: stage.get(),
            after: limits.handshake_timeout,
        }),
    }
}

async fn accept_within(
    stream: TcpStream,
    tls: &PeerTls,
    shard: u16,
    limits: &ValidLimits,
    counters: &Arc<PeerCounters>,
    stage: &Cell<Stage>,
) -> Result<Established, Refusal> {
    // Latency matters more than packet count for Raft's small calls.
    let _ = stream.set_nodelay(true);
    let session = rustls::ServerConnection::new(tls.server_config())
        .map_err(|error| Refusal::Tls(error.to_string()))?;
    let (mut reader, mut writer) = link::split(
        stream,
        session.into(),
        limits.frame_bytes_max,
        limits.stall_timeout,
        counters.clone(),
    );
    complete_tls(&mut reader, &mut writer).await?;
    stage.set(Stage::Hello);
    let hello = read_hello(&mut reader).await?;
    if hello.cluster != *tls.cluster() {
        return Err(Refusal::Hello(format!(
            "the peer belongs to cluster {:?}, this node to {:?}",
            hello.cluster.as_str(),
            tls.cluster().as_str()
        )));
    }
    let named = reader
        .tls(|session| node_named_by(first_certificate(session), tls.cluster()))
        .map_err(|error| Refusal::Identity(error.to_string()))?;
    if named != hello.node_id {
        return Err(Refusal::Identity(format!(
            "its certificate names node {named}, its hello claims node {}",
            hello.node_id
        )));
    }
    if hello.target_node_id != tls.node_id() {
        return Err(Refusal::Identity(format!(
            "node {} meant to reach node {}, and this is node {}",
            hello.node_id,
            hello.target_node_id,
            tls.node_id()
        )));
    }
    let answer = Hello {
        cluster: tls.cluster().clone(),
        node_id: tls.node_id(),
        shard,
        target_node_id: hello.node_id,
    };
    send_hello(&mut writer, &answer).await?;
    Ok(Established {
        reader,
        writer,
        peer: hello,
    })
}

/// Connects to node `target` at `address` from `shard`.
pub(crate) async fn connect(
    address: SocketAddr,
    target: u64,
    tls: &PeerTls,
    shard: u16,
    limits: &ValidLimits,
    counters: &Arc<PeerCounters>,
) -> Result<Established, Refusal> {
    let stage = Cell::new(Stage::Connect);
    let setup = connect_within(address, target, tls, shard, limits, counters, &stage);
    match monoio::time::timeout(limits.handshake_timeout, setup).await {
        Ok(result) => result,
        Err(_) => Err(Refusal::Timeout {
            stage: stage.get(),
            after: limits.handshake_timeout,
        }),
    }
}

async fn connect_within(
    address: SocketAddr,
    target: u64,
    tls: &PeerTls,
    shard: u16,
    limits: &ValidLimits,
    counters: &Arc<PeerCounters>,
    stage: &Cell<Stage>,
) -> Result<Established, Refusal> {
    let stream = TcpStream::connect_addr(address)
        .await
        .map_err(Refusal::Connect)?;
    let _ = stream.set_nodelay(true);
    stage.set(Stage::Tls);
    let server_name = tls.server_name(target).map_err(Refusal::Tls)?;
    let session = rustls::ClientConnection::new(tls.client_config(), server_name)
        .map_err(|error| Refusal::Tls(error.to_string()))?;
    let (mut reader, mut writer) = link::split(
        stream,
        session.into(),
        limits.frame_bytes_max,
        limits.stall_timeout,
        counters.clone(),
    );
    complete_tls(&mut reader, &mut writer).await?;
    stage.set(Stage::Hello);
    let named = reader
        .tls(|session| node_named_by(first_certificate(session), tls.cluster()))
        .map_err(|error| Refusal::Identity(error.to_string()))?;
    if named != target {
        return Err(Refusal::Identity(format!(
            "the server's certificate names node {named}, and this node meant to reach node \
             {target}"
        )));
    }
    let hello = Hello {
        cluster: tls.cluster().clone(),
        node_id: tls.node_id(),
        shard,
        target_node_id: target,
    };
    send_hello(&mut writer, &hello).await?;
    let answer = read_hello(&mut reader).await?;
    if answer.cluster != *tls.cluster() {
        return Err(Refusal::Hello(format!(
            "the server belongs to cluster {:?}, this node to {:?}",
            answer.cluster.as_str(),
            tls.cluster().as_str()
        )));
    }
    if answer.node_id != named {
        return Err(Refusal::Identity(format!(
            "the server's certificate names node {named}, its hello claims node {}",
            answer.node_id
        )));
    }
    if answer.target_node_id != tls.node_id() {
        return Err(Refusal::Identity(format!(
            "the server answered a hello from node {}, and this is node {}",
            answer.target_node_id,
            tls.node_id()
        )));
    }
    Ok(Established {
        reader,
        writer,
        peer: answer,
    })
}

fn first_certificate(
    session: &rustls::Connection,
) -> Option<&rustls::pki_types::CertificateDer<'static>> {
    session.peer_certificates().and_then(|chain| chain.first())
}

/// Runs the TLS handshake to its end. On failure the alert rustls queued
/// is sent, best effort, so the peer learns why.
async fn complete_tls(reader: &mut LinkReader, writer: &mut LinkWriter) -> Result<(), Refusal> {
    loop {
        writer.flush().await.map_err(tls_refusal)?;
        if !reader.tls(|session| session.is_handshaking()) {
            return Ok(());
        }
        if let Err(end) = reader.handshake_step().await {
            if matches!(end, LinkEnd::PeerClosed) && reader.received_nothing() {
                return Err(Refusal::Probe);
            }
            let _ = writer.flush().await;
            return Err(tls_refusal(end));
        }
    }
}

fn tls_refusal(end: LinkEnd) -> Refusal {
    Refusal::Tls(match end {
        LinkEnd::PeerClosed => "the peer closed the connection during the handshake".to_string(),
        other => other.to_string(),
    })
}

async fn send_hello(writer: &mut LinkWriter, hello: &Hello) -> Result<(), Refusal> {
    let sent = async {
        writer.push(&hello.encode()).await?;
        writer.flush().await
    };
    sent.await
        .map_err(|end| Refusal::Hello(format!("sending: {end}")))
}

async fn read_hello(reader: &mut LinkReader) -> Result<Hello, Refusal> {
    let mut bytes = vec![0u8; PREFIX_BYTES];
    reader.read_exact(&mut bytes).await.map_err(hello_refusal)?;
    let mut prefix = [0u8; PREFIX_BYTES];
    prefix.copy_from_slice(&bytes);
    let rest =
        Hello::remaining_after(&prefix).map_err(|error| Refusal::Hello(error.to_string()))?;
    bytes.resize(PREFIX_BYTES + rest, 0);
    let tail = bytes.get_mut(PREFIX_BYTES..).unwrap_or_default();
    reader.read_exact(tail).await.map_err(hello_refusal)?;
    Hello::decode(&bytes).map_err(|error| Refusal::Hello(error.to_string()))
}

fn hello_refusal(end: LinkEnd) -> Refusal {
    match end {
        // A TLS alert here is the server refusing the client's
        // certificate (TLS 1.3 checks it after the client is done).
        LinkEnd::Tls(error) => Refusal::Tls(error.to_string()),
        LinkEnd::PeerClosed => Refusal::Hello(
            "the peer closed the connection before its hello (it refused this one: see its log)"
                .to_string(),
        ),
        other => Refusal::Hello(other.to_string()),
    }
}
