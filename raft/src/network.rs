//! A group's network: openraft's RPCs as bytes over a [`Transport`] (in
//! the daemon, the node-to-node mutual-TLS connections of `iggyd-peer`),
//! and the receiving side, [`serve`], which decodes a request for a local
//! group and encodes its answer.
//!
//! A call's bytes are `[kind u8][postcard body]`; an answer's are `[0]`
//! then the postcard response, or `[1]` then a UTF-8 reason (the remote
//! group refused or is gone: openraft treats it as a network failure and
//! retries with backoff), or, for a forwarded proposal, `[2]` then the
//! postcard `ProposeError` saying why it has no offsets. Bodies come from authenticated peers but are
//! still decoded as untrusted: a malformed one is refused, never a panic.
//!
//! A snapshot (`state_machine.rs`: a position, its membership and the
//! offsets store, never messages) goes as one call.
//!
//! Must not: retry a call (openraft decides), or hold a connection (the
//! transport does).

use crate::replay::{ProposeError, Replays, propose};
use crate::{Appended, PartitionRaft, PartitionTypes, Vote};
use openraft::RaftNetworkFactory;
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::network::v2::RaftNetworkV2;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult,
    TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

/// The kinds of call.
const APPEND_ENTRIES: u8 = 1;
const VOTE: u8 = 2;
const PRE_VOTE: u8 = 3;
const TRANSFER_LEADER: u8 = 4;
/// A proposal forwarded to the leader by a member that is not: the raw
/// proposal bytes follow the kind.
const FORWARD: u8 = 5;
/// A resend of a proposal left in doubt, forwarded to the leader to be
/// resolved first (`crate::replay`): the last entry applied where its
/// first attempt began (u64, little-endian), then the proposal's bytes.
const FORWARD_RESOLVING: u8 = 6;
/// Stored consumer offsets forwarded to the leader: the offsets entry's
/// payload (`crate::offsets`) follows the kind.
const FORWARD_OFFSETS: u8 = 7;
/// A purge forwarded to the leader: the offset below which messages go
/// (u64, little-endian) follows the kind (`crate::Proposal::Purge`).
const FORWARD_PURGE: u8 = 11;
/// A membership change forwarded to the group's leader (`iggyd cluster
/// add-node|remove-node` run on another node): the postcard
/// [`ForwardedChange`] follows the kind.
const CHANGE_MEMBERS: u8 = 8;

/// A snapshot for the receiver to install: the postcard `(vote, meta,
/// bytes)` follows the kind.
const INSTALL_SNAPSHOT: u8 = 9;

/// An AppendEntries request of a pipelined stream (`crate::pipeline`): the
/// stream's id and the call's sequence in it (u64 each, little-endian),
/// then the postcard request; answered with the postcard
/// `StreamAppendResult`.
pub(crate) const APPEND_STREAM: u8 = 10;

/// The longest a forwarded membership change's steps may each wait.
const MAX_CHANGE_WAIT_MS: u64 = 60_000;

const ANSWER_OK: u8 = 0;
const ANSWER_REFUSED: u8 = 1;
/// A forwarded proposal's [`ProposeError`], encoded.
const ANSWER_NOT_PROPOSED: u8 = 2;

/// Moves a call's bytes to node `target` for group `channel` and brings
/// back the answer's, or why not.
pub trait Transport: Clone + 'static {
    fn call(
        &self,
        target: u64,
        channel: u64,
        body: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<u8>, TransportError>>;

    /// A group met node `target` as `node` in its membership (openraft
    /// asks for a connection to it): a transport that dials by address
    /// learns it here. Nothing by default.
    fn learn(&self, _target: u64, _node: &openraft::impls::BasicNode) {}
}

/// A membership change as forwarded to a group's leader: the change, how
/// long each of its steps may wait there, and whether the removal may
/// leave an even voter count.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForwardedChange {
    pub change: crate::membership::MemberChange,
    pub wait_ms: u64,
    pub allow_even: bool,
}

/// Why a call got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportError {
    /// The node could not be reached (not connected, refused, gone).
    Unreachable(String),
    /// The call may have arrived but no answer came (time-out, the
    /// connection broke while it was out).
    Failed(String),
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportError::Unreachable(reason) => write!(f, "unreachable: {reason}"),
            TransportError::Failed(reason) => write!(f, "failed: {reason}"),
        }
    }
}

/// `[kind][postcard value]`, written once into a buffer of its exact size
/// (measured first, which copies nothing): a call carries megabytes of
/// entries, and growing a buffer for them, then copying it after the kind,
/// cost a replicated send a tenth of the leader's copying.
fn encode<T: serde::Serialize>(kind: u8, value: &T) -> Result<Vec<u8>, String> {
    encode_with(kind, &[], value)
}

/// [`encode`], with `header`'s bytes between the kind and the value.
pub(crate) fn encode_with<T: serde::Serialize>(
    kind: u8,
    header: &[u8],
    value: &T,
) -> Result<Vec<u8>, String> {
    let size =
        postcard::serialize_with_flavor::<T, _, _>(value, postcard::ser_flavors::Size::default())
            .map_err(|error| error.to_string())?;
    let mut out = Vec::with_capacity(1 + header.len() + size);
    out.push(kind);
    out.extend_from_slice(header);
    postcard::to_io(value, &mut out).map_err(|error| error.to_string())?;
    Ok(out)
}

fn io_error(reason: String) -> std::io::Error {
    std::io::Error::other(reason)
}

thread_local! {
    /// The call being decoded by [`decode_shared`]: byte strings inside it
    /// are shared from it rather than copied.
    static DECODING: std::cell::RefCell<Option<bytes::Bytes>> =
        const { std::cell::RefCell::new(None) };
}

/// Decodes `body` (postcard), with every batch in it sharing `body`'s
/// buffer ([`shared_bytes`]): an AppendEntries call carries megabytes of
/// batches, and copying each out of the call was a tenth of a follower's
/// copying.
pub(crate) fn decode_shared<T: serde::de::DeserializeOwned>(
    body: &bytes::Bytes,
) -> Result<T, postcard::Error> {
    DECODING.with(|decoding| *decoding.borrow_mut() = Some(body.clone()));
    let decoded = postcard::from_bytes(body);
    DECODING.with(|decoding| *decoding.borrow_mut() = None);
    decoded
}

/// A byte string as `Bytes`: a slice of the call [`decode_shared`] is
/// decoding when the bytes lie inside it, a copy otherwise.
pub(crate) fn shared_bytes<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<bytes::Bytes, D::Error> {
    struct Shared;
    impl<'de> serde::de::Visitor<'de> for Shared {
        type Value = bytes::Bytes;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_borrowed_bytes<E>(self, bytes: &'de [u8]) -> Result<bytes::Bytes, E> {
            let shared = DECODING.with(|decoding| {
                decoding.borrow().as_ref().and_then(|call| {
                    let start = call.as_ptr() as usize;
                    let inner = bytes.as_ptr() as usize;
                    (inner >= start && inner + bytes.len() <= start + call.len())
                        .then(|| call.slice_ref(bytes))
                })
            });
            Ok(shared.unwrap_or_else(|| bytes::Bytes::copy_from_slice(bytes)))
        }

        fn visit_bytes<E>(self, bytes: &[u8]) -> Result<bytes::Bytes, E> {
            Ok(bytes::Bytes::copy_from_slice(bytes))
        }

        fn visit_byte_buf<E>(self, bytes: Vec<u8>) -> Result<bytes::Bytes, E> {
            Ok(bytes::Bytes::from(bytes))
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<bytes::Bytes, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(byte) = seq.next_element::<u8>()? {
                out.push(byte);
            }
            Ok(bytes::Bytes::from(out))
        }
    }
    deserializer.deserialize_bytes(Shared)
}

/// openraft's name for a call that got no answer.
pub(crate) fn rpc_error<C: openraft::RaftTypeConfig>(error: TransportError) -> RPCError<C> {
    match error {
        TransportError::Unreachable(reason) => {
            RPCError::Unreachable(Unreachable::new(&io_error(reason)))
        }
        TransportError::Failed(reason) => RPCError::Network(NetworkError::new(&io_error(reason))),
    }
}

/// The answer's value, or the reason the remote refused.
pub(crate) fn decode_answer<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bytes.split_first() {
        Some((&ANSWER_OK, body)) => postcard::from_bytes(body)
            .map_err(|error| format!("a malformed answer from the peer: {error}")),
        Some((&ANSWER_REFUSED, reason)) => Err(format!(
            "the peer refused: {}",
            String::from_utf8_lossy(reason)
        )),
        _ => Err("a malformed answer from the peer".to_string()),
    }
}

pub(crate) fn answer_ok<T: serde::Serialize>(value: &T) -> Vec<u8> {
    encode(ANSWER_OK, value)
        .unwrap_or_else(|error| answer_refused(&format!("cannot encode the answer: {error}")))
}

pub(crate) fn answer_refused(reason: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(reason.len() + 1);
    out.push(ANSWER_REFUSED);
    out.extend_from_slice(reason.as_bytes());
    out
}

/// Makes a group's connections to its peers, for the type configuration
/// `C` (production's by default, or the cluster simulation's).
pub struct Network<T: Transport, C = PartitionRaft> {
    transport: T,
    channel: u64,
    handing: Option<Handing>,
    types: PhantomData<fn() -> C>,
}

/// Told the node a group's leadership is being handed to, each time the
/// group (as leader) asks its voters to let it (openraft's transfer
/// broadcast, which an admin's transfer and a leader's removal start).
pub type Handing = std::rc::Rc<dyn Fn(u64)>;

impl<T: Transport, C> Clone for Network<T, C> {
    fn clone(&self) -> Self {
        Network {
            transport: self.transport.clone(),
            channel: self.channel,
            handing: self.handing.clone(),
            types: PhantomData,
        }
    }
}

impl<T: Transport, C> Network<T, C> {
    /// The network of group `channel` (the partition's storage id, or the
    /// metadata group's).
    pub fn new(transport: T, channel: u64) -> Network<T, C> {
        Network {
            transport,
            channel,
            handing: None,
            types: PhantomData,
        }
    }

    /// This network tells `handing` the target of each leadership
    /// transfer its group broadcasts.
    pub fn handing(mut self, handing: Handing) -> Network<T, C> {
        self.handing = Some(handing);
        self
    }

    /// Proposes `proposal` at `leader` (a member that is not the leader
    /// forwards what its clients send), resolving a resend first when
    /// `resolve_after` is given (`crate::replay::propose`). The answer is
    /// the leader's once the entry is committed, or why there are no
    /// offsets: a call that never left is `NotDelivered`, one that got no
    /// answer `Unknown`.
    pub async fn forward(
        &self,
        leader: u64,
        proposal: Vec<u8>,
        resolve_after: Option<u64>,
        timeout: std::time::Duration,
    ) -> Result<Appended, ProposeError> {
        let mut body = Vec::with_capacity(proposal.len() + 9);
        match resolve_after {
            None => body.push(FORWARD),
            Some(after) => {
                body.push(FORWARD_RESOLVING);
                body.extend_from_slice(&after.to_le_bytes());
            }
        }
        body.extend_from_slice(&proposal);
        drop(proposal);
        self.forward_body(leader, body, timeout).await
    }

    /// Proposes an offsets entry's `payload` at `leader`; answered with
    /// its index once it is committed, or why it was not (as
    /// [`Self::forward`]).
    pub async fn forward_offsets(
        &self,
        leader: u64,
        payload: &[u8],
        timeout: std::time::Duration,
    ) -> Result<u64, ProposeError> {
        let mut body = Vec::with_capacity(payload.len() + 1);
        body.push(FORWARD_OFFSETS);
        body.extend_from_slice(payload);
        self.forward_body(leader, body, timeout)
            .await
            .map(|answer| answer.base_offset)
    }

    /// Proposes a purge of the messages below `below` at `leader`;
    /// answered with the entry's index once it is committed, or why it
    /// was not (as [`Self::forward`]).
    pub async fn forward_purge(
        &self,
        leader: u64,
        below: u64,
        timeout: std::time::Duration,
    ) -> Result<u64, ProposeError> {
        let mut body = Vec::with_capacity(9);
        body.push(FORWARD_PURGE);
        body.extend_from_slice(&below.to_le_bytes());
        self.forward_body(leader, body, timeout)
            .await
            .map(|answer| answer.base_offset)
    }

    /// Asks `leader` to carry out a membership change of this group
    /// (`crate::membership::change_members` there). `timeout` bounds the
    /// call: longer than the change's own waits.
    pub async fn forward_change(
        &self,
        leader: u64,
        change: &ForwardedChange,
        timeout: std::time::Duration,
    ) -> Result<crate::membership::MemberOutcome, crate::membership::MemberError> {
        use crate::membership::MemberError;
        let body = encode(CHANGE_MEMBERS, change).map_err(MemberError::Failed)?;
        let bytes = self
            .transport
            .call(leader, self.channel, body, timeout)
            .await
            .map_err(|error| match error {
                TransportError::Unreachable(why) => MemberError::Unreachable { node: leader, why },
                failed => MemberError::Failed(format!("node {leader}: {failed}")),
            })?;
        decode_answer::<Result<crate::membership::MemberOutcome, MemberError>>(&bytes)
            .map_err(|error| MemberError::Failed(format!("node {leader}: {error}")))?
    }

    async fn forward_body(
        &self,
        leader: u64,
        body: Vec<u8>,
        timeout: std::time::Duration,
    ) -> Result<Appended, ProposeError> {
        let bytes = self
            .transport
            .call(leader, self.channel, body, timeout)
            .await
            .map_err(|error| match error {
                TransportError::Unreachable(why) => ProposeError::NotDelivered(why),
                TransportError::Failed(why) => ProposeError::Unknown(why),
            })?;
        match bytes.split_first() {
            Some((&ANSWER_NOT_PROPOSED, body)) => {
                Err(postcard::from_bytes(body).unwrap_or_else(|error| {
                    ProposeError::Unknown(format!("a malformed answer from the leader: {error}"))
                }))
            }
            // A refusal before the proposal reached the group (no such
            // group there yet, a malformed call): nothing was appended.
            Some((&ANSWER_REFUSED, reason)) => Err(ProposeError::NotDelivered(format!(
                "the leader refused: {}",
                String::from_utf8_lossy(reason)
            ))),
            _ => decode_answer(&bytes).map_err(ProposeError::Unknown),
        }
    }
}

impl<T: Transport, C: PartitionTypes> RaftNetworkFactory<C> for Network<T, C> {
    type Network = Connection<T, C>;

    async fn new_client(
        &mut self,
        target: u64,
        node: &openraft::impls::BasicNode,
    ) -> Connection<T, C> {
        self.transport.learn(target, node);
        Connection {
            transport: self.transport.clone(),
            target,
            channel: self.channel,
            handing: self.handing.clone(),
            types: PhantomData,
        }
    }
}

/// A group's way to one peer.
pub struct Connection<T: Transport, C = PartitionRaft> {
    transport: T,
    target: u64,
    channel: u64,
    handing: Option<Handing>,
    types: PhantomData<fn() -> C>,
}

impl<T: Transport, C: PartitionTypes> Connection<T, C> {
    async fn call<Q: serde::Serialize, A: serde::de::DeserializeOwned>(
        &self,
        kind: u8,
        request: &Q,
        option: &RPCOption,
    ) -> Result<A, RPCError<C>> {
        let body = encode(kind, request).map_err(|reason| {
            RPCError::Network(NetworkError::new(&io_error(format!(
                "cannot encode the call: {reason}"
            ))))
        })?;
        let bytes = self
            .transport
            .call(self.target, self.channel, body, option.hard_ttl())
            .await
            .map_err(rpc_error)?;
        decode_answer(&bytes)
            .map_err(|reason| RPCError::Network(NetworkError::new(&io_error(reason))))
    }
}

impl<T: Transport, C: PartitionTypes> RaftNetworkV2<C> for Connection<T, C> {
    type SnapshotData = std::io::Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<C>, RPCError<C>> {
        self.call(APPEND_ENTRIES, &rpc, &option).await
    }

    /// Pipelined: up to `crate::pipeline::DEPTH` requests out at once.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> openraft::base::BoxFuture<
        's,
        Result<
            openraft::base::BoxStream<'s, Result<StreamAppendResult<C>, RPCError<C>>>,
            RPCError<C>,
        >,
    >
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<C>> + Unpin + 'static,
    {
        let stream = crate::pipeline::stream(
            self.transport.clone(),
            self.target,
            self.channel,
            input,
            option,
        );
        Box::pin(async move { Ok(stream) })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<C>,
        option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        self.call(VOTE, &rpc, &option).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<C>,
        option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        self.call(PRE_VOTE, &rpc, &option).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::alias::SnapshotOf<C, Self::SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<C>, StreamingError<C>> {
        let call = (vote, snapshot.meta, snapshot.snapshot.into_inner());
        let answer = self.call(INSTALL_SNAPSHOT, &call, &option);
        futures_util::pin_mut!(answer, cancel);
        match futures_util::future::select(answer, cancel).await {
            futures_util::future::Either::Left((answer, _)) => answer.map_err(StreamingError::from),
            futures_util::future::Either::Right((closed, _)) => Err(StreamingError::Closed(closed)),
        }
    }

    async fn transfer_leader(
        &mut self,
        request: TransferLeaderRequest<C>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<C>, RPCError<C>> {
        if let Some(handing) = &self.handing {
            handing(*request.to_node_id());
        }
        self.call(TRANSFER_LEADER, &request, &option).await
    }
}

/// A local group, as the receiving side sees it.
pub type Raft<SM, C = PartitionRaft> = openraft::Raft<C, SM>;

/// Asked before a vote or pre-vote request reaches openraft, with the
/// candidate's node id: `Some(reason)` refuses it. A group whose members
/// do not send each other heartbeats while idle (the daemon's quiet
/// partition groups) cannot rely on openraft's leader lease, which
/// heartbeats renew; the guard says instead whether the leader is alive.
/// Leadership transfers are never asked: the leader authorized them.
pub type VoteGuard<'a> = &'a dyn Fn(u64) -> Option<String>;

/// Answers one call for a local group: decodes it, hands it to `raft`,
/// encodes its answer. Never fails: a refusal is an answer too. A
/// partition group's `replays` let forwarded proposals resolve resends
/// (`crate::replay`); a group without them refuses forwarded proposals.
pub async fn serve<SM, C>(
    raft: &Raft<SM, C>,
    replays: Option<&Replays>,
    body: bytes::Bytes,
) -> Vec<u8>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C, SnapshotData = std::io::Cursor<Vec<u8>>>,
{
    serve_guarded(raft, replays, None, None, body).await
}

/// Told of a leadership transfer a leader asked of this member: the
/// leader's node id and term.
pub type HandingSeen<'a> = &'a dyn Fn(u64, u64);

/// [`serve`], with `guard` asked before a vote or pre-vote is handed to
/// openraft (a refused one is answered as refused: no vote), and `seen`
/// told of each leadership transfer a leader asks of this member.
pub async fn serve_guarded<SM, C>(
    raft: &Raft<SM, C>,
    replays: Option<&Replays>,
    guard: Option<VoteGuard<'_>>,
    seen: Option<HandingSeen<'_>>,
    call: bytes::Bytes,
) -> Vec<u8>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C, SnapshotData = std::io::Cursor<Vec<u8>>>,
{
    let refused = |rpc: &VoteRequest<C>| {
        if rpc.leadership_transfer {
            return None;
        }
        guard.and_then(|guard| guard(rpc.vote.leader_id().voted_for))
    };
    let Some((&kind, body)) = call.split_first() else {
        return answer_refused("an empty call");
    };
    // The call after its kind, sharing the call's buffer.
    let shared = || call.slice(1..);
    fn malformed(error: postcard::Error) -> Vec<u8> {
        answer_refused(&format!("a malformed call: {error}"))
    }
    match kind {
        APPEND_ENTRIES => match decode_shared::<AppendEntriesRequest<C>>(&shared()) {
            Ok(rpc) => match raft.append_entries(rpc).await {
                Ok(response) => answer_ok(&response),
                Err(error) => answer_refused(&error.to_string()),
            },
            Err(error) => malformed(error),
        },
        APPEND_STREAM => {
            let Some((stream, seq, _)) = crate::pipeline::split_header(body) else {
                return answer_refused("a malformed call: a stream's call without its place");
            };
            let request = shared().slice(crate::pipeline::HEADER_BYTES..);
            match decode_shared::<AppendEntriesRequest<C>>(&request) {
                Ok(rpc) => crate::pipeline::receive(raft, stream, seq, rpc).await,
                Err(error) => malformed(error),
            }
        }
        VOTE => match postcard::from_bytes::<VoteRequest<C>>(body) {
            Ok(rpc) if let Some(reason) = refused(&rpc) => answer_refused(&reason),
            Ok(rpc) => match raft.vote(rpc).await {
                Ok(response) => answer_ok(&response),
                Err(error) => answer_refused(&error.to_string()),
            },
            Err(error) => malformed(error),
        },
        PRE_VOTE => match postcard::from_bytes::<VoteRequest<C>>(body) {
            Ok(rpc) if let Some(reason) = refused(&rpc) => answer_refused(&reason),
            Ok(rpc) => match raft.pre_vote(rpc).await {
                Ok(response) => answer_ok(&response),
                Err(error) => answer_refused(&error.to_string()),
            },
            Err(error) => malformed(error),
        },
        TRANSFER_LEADER => match postcard::from_bytes::<TransferLeaderRequest<C>>(body) {
            Ok(request) => {
                if let Some(seen) = seen {
                    let leader = request.from_leader().leader_id();
                    seen(leader.voted_for, leader.term);
                }
                match raft.handle_transfer_leader(request).await {
                    Ok(response) => answer_ok(&response),
                    Err(error) => answer_refused(&error.to_string()),
                }
            }
            Err(error) => malformed(error),
        },
        FORWARD | FORWARD_RESOLVING => {
            let Some(replays) = replays else {
                return answer_refused("this group takes no forwarded proposals");
            };
            let (resolve_after, proposal) = if kind == FORWARD_RESOLVING {
                let Some((after, proposal)) = body.split_first_chunk::<8>() else {
                    return answer_refused("a malformed call: a resend without its point");
                };
                (Some(u64::from_le_bytes(*after)), proposal)
            } else {
                (None, body)
            };
            answer_proposal(propose(raft, replays, proposal.to_vec(), resolve_after).await)
        }
        FORWARD_OFFSETS => {
            if replays.is_none() {
                return answer_refused("this group takes no forwarded proposals");
            }
            if let Err(error) = crate::offsets::decode(body) {
                return answer_refused(&format!("a malformed call: {error}"));
            }
            answer_proposal(
                // The answer names the entry's index (as offsets
                // `index..=index`), so the forwarder can wait to apply it.
                crate::replay::propose_control(
                    raft,
                    crate::replay::ControlEntry::Offsets(body.to_vec()),
                )
                .await
                .map(|index| Appended {
                    base_offset: index,
                    last_offset: index,
                }),
            )
        }
        FORWARD_PURGE => {
            if replays.is_none() {
                return answer_refused("this group takes no forwarded proposals");
            }
            let Ok(below) = <[u8; 8]>::try_from(body) else {
                return answer_refused("a malformed call: a purge without its offset");
            };
            answer_proposal(
                // The answer names the entry's index, as for offsets.
                crate::replay::propose_control(
                    raft,
                    crate::replay::ControlEntry::Purge(u64::from_le_bytes(below)),
                )
                .await
                .map(|index| Appended {
                    base_offset: index,
                    last_offset: index,
                }),
            )
        }
        INSTALL_SNAPSHOT => {
            match postcard::from_bytes::<(Vote, openraft::alias::SnapshotMetaOf<C>, Vec<u8>)>(body)
            {
                Ok((vote, meta, data)) => {
                    let snapshot = openraft::alias::SnapshotOf::<C, std::io::Cursor<Vec<u8>>> {
                        meta,
                        snapshot: std::io::Cursor::new(data),
                    };
                    match raft.install_full_snapshot(vote, snapshot).await {
                        Ok(response) => answer_ok(&response),
                        Err(error) => answer_refused(&error.to_string()),
                    }
                }
                Err(error) => malformed(error),
            }
        }
        CHANGE_MEMBERS => match postcard::from_bytes::<ForwardedChange>(body) {
            Ok(forwarded) => {
                // Bounded here too: a peer's wait is not trusted blindly.
                let wait = Duration::from_millis(forwarded.wait_ms.min(MAX_CHANGE_WAIT_MS));
                answer_ok(
                    &crate::membership::change_members(
                        raft,
                        forwarded.change,
                        wait,
                        forwarded.allow_even,
                    )
                    .await,
                )
            }
            Err(error) => malformed(error),
        },
        other => answer_refused(&format!("an unknown call kind {other}")),
    }
}

/// The answer to a forwarded proposal.
fn answer_proposal(result: Result<Appended, ProposeError>) -> Vec<u8> {
    match result {
        Ok(appended) => answer_ok(&appended),
        Err(error) => match postcard::to_allocvec(&error) {
            Ok(encoded) => {
                let mut out = Vec::with_capacity(encoded.len() + 1);
                out.push(ANSWER_NOT_PROPOSED);
                out.extend(encoded);
                out
            }
            Err(error) => answer_refused(&format!("cannot encode the answer: {error}")),
        },
    }
}

/// The answer to a call for a group this node does not have (not created
/// yet here, or removed).
pub fn no_such_group(channel: u64) -> Vec<u8> {
    answer_refused(&format!("no group {channel} here"))
}
