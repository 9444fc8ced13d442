//! The partition plane: send, poll, flush and consumer offsets. The
//! connection's shard resolves the partition and its owner from the view,
//! validates batches (so checksum work spreads over the accepting shards),
//! and hands the operation to the owner's pump over the mesh.

use super::{
    Handled, HandlerError, Outcome, Replier, Request_, member_key, named_topic, partition_op,
};
use crate::net::context::NetContext;
use crate::net::reply_budget::ReplyHold;
use crate::net::session::Session;
use crate::shard::op::{POLL_HEADROOM, PartitionOp, PollRequest, Reply};
use crate::shard::partition::PartitionKey;
use crate::shard::router;
use iggyd_metadata::permissions::Principal;
use iggyd_metadata::{Ident, MetadataError, Stream, Topic};
use iggyd_storage::SharedSlice;
use iggyd_storage::consumer_offsets::{self, ConsumerKey};
use iggyd_wire::batch::ValidBatch;
use iggyd_wire::protocol::codes::Status;
use iggyd_wire::protocol::command::{Command, NotSend, OffsetTarget, PollMessages, SendMessages};
use iggyd_wire::protocol::header::RequestHeader;
use iggyd_wire::protocol::primitives::{Consumer, ConsumerKind, Partitioning, partition_for_key};
use iggyd_wire::protocol::reply::{
    ConsumerOffsetInfo, SendConfirmation, encode_consumer_offset, encode_poll_prefix,
    encode_send_confirmations,
};
use std::rc::Rc;

/// The empty poll that tells a group member its assignment is stale
/// (§5.3, §8 item 4).
const NOT_YOUR_PARTITION: u32 = u32::MAX;

fn partition_key(
    context: &crate::net::context::NetContext,
    stream: &Stream,
    topic: &Topic,
    partition_id: u32,
) -> Handled<(PartitionKey, crate::shard::mesh::ShardId)> {
    let route = router::partition_route(stream, topic, partition_id, context.shards)
        .ok_or(HandlerError::Status(Status::PartitionNotFound))?;
    Ok((route.key, route.owner))
}

/// Whether this node's metadata knows the partition `send` goes to: a
/// cluster node that does not lead the metadata group serves such a send
/// (`super::elsewhere`), and otherwise sends the client to the leader
/// rather than tell it the topic does not exist (it may not have applied
/// yet what the leader just created).
pub(super) fn routable_here(context: &NetContext, send: &SendMessages<'_>) -> bool {
    let view = context.view();
    let Ok((stream, topic)) = named_topic(&view, &send.stream, &send.topic) else {
        return false;
    };
    match send.partitioning {
        Partitioning::PartitionId(partition_id) => {
            partition_key(context, stream, topic, partition_id).is_ok()
        }
        Partitioning::Balanced | Partitioning::MessagesKey(_) => topic.partitions_count() > 0,
    }
}

/// What a request does with a consumer's offset: a group's offsets belong
/// to the group, so reading one needs only the permission to poll (lag
/// monitors and `iggy consumer-offset get --kind consumer-group` are not
/// members), while polling and storing need the partition's assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Read,
    Poll,
    Write,
}

/// Whose offset, and which partition, for a poll or an offset request.
/// `Ok(None)` means "a group member asked for a partition it does not own".
/// A poll by a session that is not a member of the group — the group was
/// deleted, or the membership was lost (stale eviction, restart) — is
/// `ConsumerGroupMemberNotFound` (5006): the 0.11.0 SDK's consumer answers
/// it by joining again (creating the group when it may), so it keeps
/// consuming instead of failing.
fn consumer_target(
    request: &Request_<'_>,
    topic: &Topic,
    consumer: &Consumer<'_>,
    partition_id: Option<u32>,
    usage: Use,
) -> Handled<Option<(ConsumerKey, u32)>> {
    match consumer.kind {
        ConsumerKind::Consumer => {
            let id = consumer.single_consumer_key().unwrap_or(0);
            let key = ConsumerKey {
                kind: consumer_offsets::ConsumerKind::Consumer,
                id,
            };
            Ok(Some((key, partition_id.unwrap_or(0))))
        }
        ConsumerKind::ConsumerGroup => {
            let group = topic.group(&Ident::from(&consumer.id));
            let not_member = || {
                HandlerError::Status(
                    iggyd_wire::protocol::codes::Status::ConsumerGroupMemberNotFound,
                )
            };
            let Some(group) = group else {
                if usage == Use::Poll {
                    return Err(not_member());
                }
                return Err(HandlerError::Metadata(
                    iggyd_metadata::MetadataError::ConsumerGroupNotFound {
                        group: Ident::from(&consumer.id).to_string(),
                    },
                ));
            };
            let key = ConsumerKey {
                kind: consumer_offsets::ConsumerKind::Group,
                id: group.id,
            };
            if usage == Use::Read {
                return Ok(Some((key, partition_id.unwrap_or(0))));
            }
            let assignment = group.assignment(member_key(request.session));
            if assignment.is_none() && usage == Use::Poll {
                return Err(not_member());
            }
            let Some(partition_id) = partition_id else {
                return Ok(None);
            };
            let owned = assignment.is_some_and(|partitions| partitions.contains(&partition_id));
            if !owned {
                return Ok(None);
            }
            Ok(Some((key, partition_id)))
        }
    }
}

/// The offset of the last message in `records` (stored records, as a
/// poll serves them), or `None` when there is none.
fn last_offset(records: &[u8]) -> Option<u64> {
    let mut rest = records;
    let mut last = None;
    while let Ok(header) = iggyd_wire::batch::BatchHeader::decode(rest) {
        let length = usize::try_from(header.batch_length).ok()?;
        let record = rest.get(..length)?;
        if let Ok(frames) = iggyd_wire::batch::frames(record)
            && let Some(Ok(frame)) = frames.last()
        {
            last = Some(frame.offset);
        }
        rest = rest.get(length..)?;
    }
    last
}

pub(crate) async fn poll(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    poll: &PollMessages<'_>,
) -> Handled<Outcome> {
    let view = request.view.clone();
    let (stream, topic) = named_topic(&view, &poll.stream, &poll.topic)?;
    principal.poll_messages(stream.id, topic.id)?;
    // A member's poll first settles cooperative hand-offs (a newer view
    // may follow).
    let group_ids = super::groups::group_of(stream.id, topic, &poll.consumer);
    if let Some(ids) = group_ids {
        super::groups::before_poll(request, ids).await;
    }
    let view = request.view.clone();
    let (stream, topic) = named_topic(&view, &poll.stream, &poll.topic)?;
    let not_yours = |request: &Request_<'_>| {
        let mut out = Vec::with_capacity(16);
        encode_poll_prefix(&mut out, NOT_YOUR_PARTITION, 0, 0);
        request.replier.ok(&out)
    };
    let Some((consumer, partition_id)) =
        consumer_target(request, topic, &poll.consumer, poll.partition_id, Use::Poll)?
    else {
        return Ok(not_yours(request));
    };
    if let Some(ids) = group_ids
        && super::groups::hand_off_if_caught_up(request, ids, partition_id).await
    {
        return Ok(not_yours(request));
    }
    let (key, owner) = partition_key(request.context, stream, topic, partition_id)?;
    // The reply's records count against this shard's reply budget from
    // the pump's read until the kernel took them.
    let mut hold = request.context.net.reserve_reply(request.context.shard);
    let poll_request = PollRequest {
        consumer: Some(consumer),
        strategy: poll.strategy,
        count: poll.count,
        auto_commit: poll.auto_commit,
        bytes_max: hold.as_ref().map_or(0, ReplyHold::bytes),
    };
    let result = partition_op(request.context, owner, |reply| PartitionOp::Poll {
        key,
        request: poll_request,
        reply,
    })
    .await?;
    // The records follow POLL_HEADROOM free bytes: the poll prefix goes
    // right before them and the reply header before that, in place.
    let mut frame = result.bytes;
    let mut prefix = Vec::with_capacity(16);
    encode_poll_prefix(
        &mut prefix,
        partition_id,
        result.current_offset,
        result.message_count,
    );
    if let Some(ids) = group_ids {
        // The records may end in the part lent from the read window.
        let served = result
            .shared
            .as_ref()
            .and_then(|shared| last_offset(shared.as_slice()))
            .or_else(|| last_offset(frame.get(POLL_HEADROOM..).unwrap_or_default()));
        super::groups::record_poll(request.session, ids, partition_id, served, poll.auto_commit);
    }
    let header_size = iggyd_wire::protocol::limits::HEADER_SIZE;
    assert!(POLL_HEADROOM == header_size + prefix.len());
    frame[header_size..POLL_HEADROOM].copy_from_slice(&prefix);
    let reply_bytes = frame.len() + result.shared.as_ref().map_or(0, SharedSlice::len);
    if let Some(hold) = &mut hold {
        hold.settle(reply_bytes as u64);
    }
    Ok(request.replier.ok_in_place(frame, result.shared, hold))
}

/// A send resolved against the view while the request still borrows its
/// frame: where the batch goes and where it lies in the frame.
#[derive(Debug)]
pub struct SendPlan {
    commit: u64,
    stream_id: u32,
    topic_id: u32,
    partition_id: u32,
    key: PartitionKey,
    owner: crate::shard::mesh::ShardId,
    messages_count: u32,
    batch: std::ops::Range<usize>,
}

/// Checks the session and the permission, picks the partition and its
/// owner; everything a send needs before its frame's buffer moves on.
pub fn plan_send(
    context: &Rc<NetContext>,
    session: &mut Session,
    header: &RequestHeader,
    send: &SendMessages<'_>,
    frame: &[u8],
) -> Result<SendPlan, Outcome> {
    let commit = session.next_commit();
    let replier = Replier {
        header,
        session: session.number(),
        commit,
    };
    let view = super::authorized_view(context, session, header, &replier)?;
    let plan = (|| -> Handled<SendPlan> {
        let user = super::principal_user(&view, session)
            .ok_or(HandlerError::Status(Status::Unauthenticated))?;
        let (stream, topic) = named_topic(&view, &send.stream, &send.topic)?;
        Principal::of(user).send_messages(stream.id, topic.id)?;
        let partitions = topic.partitions_count();
        if partitions == 0 {
            return Err(HandlerError::Status(Status::NoPartitions));
        }
        let partition_id = match send.partitioning {
            Partitioning::PartitionId(partition_id) => partition_id,
            Partitioning::Balanced => context.next_balanced(partitions),
            Partitioning::MessagesKey(bytes) => partition_for_key(bytes, partitions).unwrap_or(0),
        };
        let (key, owner) = partition_key(context, stream, topic, partition_id)?;
        // The batch is a sub-slice of the frame: its position is what
        // survives the hand-over of the buffer.
        let start = (send.batch.as_ptr() as usize).wrapping_sub(frame.as_ptr() as usize);
        let batch = start..start + send.batch.len();
        let same_bytes = frame
            .get(batch.clone())
            .is_some_and(|bytes| std::ptr::eq(bytes.as_ptr(), send.batch.as_ptr()));
        if !same_bytes {
            return Err(HandlerError::Status(Status::InvalidCommand));
        }
        Ok(SendPlan {
            commit,
            stream_id: stream.id,
            topic_id: topic.id,
            partition_id,
            key,
            owner,
            messages_count: send.messages_count,
            batch,
        })
    })();
    plan.map_err(|error| replier.refuse(context, &error))
}

/// Validates the batch where it lies in `frame` (every checksum, once: the
/// owner's pump only stamps and appends) and hands frame and batch to the
/// owner shard without copying them.
pub async fn send_planned(
    context: &Rc<NetContext>,
    session: &mut Session,
    header: &RequestHeader,
    plan: SendPlan,
    frame: Vec<u8>,
) -> Outcome {
    let replier = Replier {
        header,
        session: session.number(),
        commit: plan.commit,
    };
    let frame_bytes = frame.len() as u64;
    let result = async {
        let batch = ValidBatch::new(frame, plan.batch.clone())
            .map_err(|error| HandlerError::Status(error.status()))?;
        if batch.message_count() != plan.messages_count {
            return Err(HandlerError::Status(Status::InvalidCommand));
        }
        let key = plan.key;
        let counter = if plan.owner == context.shard {
            &context.sends_local
        } else {
            &context.sends_forwarded
        };
        counter.set(counter.get() + 1);
        // Bytes in flight to the owner are bounded: wait for room, hold it
        // until the owner answers (`net::append_budget`).
        let _permit = match context.net.append_budget(plan.owner) {
            Some(budget) => Some(budget.acquire(frame_bytes).await),
            None => None,
        };
        let ack = partition_op(context, plan.owner, |reply| PartitionOp::Append {
            key,
            batch,
            reply,
        })
        .await?;
        let mut out = Vec::with_capacity(24);
        encode_send_confirmations(
            &mut out,
            &[SendConfirmation {
                stream_id: plan.stream_id,
                topic_id: plan.topic_id,
                partition_id: plan.partition_id,
                base_offset: ack.base_offset,
            }],
        );
        Ok(replier.ok(&out))
    }
    .await;
    result.unwrap_or_else(|error| replier.refuse(context, &error))
}

/// A permission check on a topic, as `Principal` spells it.
type Allowed<'p> = fn(&Principal<'p>, u32, u32) -> Result<(), MetadataError>;

/// FlushUnsavedBuffer and DeleteSegments: the two commands that name one
/// partition by stream, topic and partition id and answer with an empty
/// body. The caller needs `send_messages` to flush and `manage_partitions`
/// to delete segments; the owner shard runs the op.
pub(crate) async fn partition_command<'p>(
    request: &Request_<'_>,
    principal: &Principal<'p>,
    command: NotSend<'_>,
) -> Handled<Outcome> {
    let (stream, topic, partition_id, allowed): (_, _, _, Allowed<'p>) = match &command {
        Command::FlushUnsavedBuffer {
            stream,
            topic,
            partition_id,
            ..
        } => (stream, topic, *partition_id, Principal::send_messages),
        Command::DeleteSegments {
            stream,
            topic,
            partition_id,
            ..
        } => (stream, topic, *partition_id, Principal::manage_partitions),
        _ => return Err(HandlerError::Status(Status::InvalidCommand)),
    };
    let (stream, topic) = named_topic(&request.view, stream, topic)?;
    allowed(principal, stream.id, topic.id)?;
    let (key, owner) = partition_key(request.context, stream, topic, partition_id)?;
    let context = request.context;
    match command {
        Command::FlushUnsavedBuffer { fsync, .. } => {
            partition_op(context, owner, |reply| PartitionOp::Flush {
                key,
                fsync,
                reply,
            })
            .await?;
        }
        Command::DeleteSegments { segments_count, .. } => {
            partition_op(context, owner, |reply| PartitionOp::DeleteSegments {
                key,
                count: segments_count,
                reply,
            })
            .await?;
        }
        _ => {}
    }
    Ok(request.replier.empty())
}

/// Where an offset request goes: whose offset, which partition, and the
/// partition's owner shard. `None`: a group member named a partition it
/// does not own.
struct OffsetRoute {
    consumer: ConsumerKey,
    partition_id: u32,
    key: PartitionKey,
    owner: crate::shard::mesh::ShardId,
}

fn offset_route(
    request: &Request_<'_>,
    principal: &Principal<'_>,
    target: &OffsetTarget<'_>,
    usage: Use,
) -> Handled<Option<OffsetRoute>> {
    let (stream, topic) = named_topic(&request.view, &target.stream, &target.topic)?;
    principal.poll_messages(stream.id, topic.id)?;
    let Some((consumer, partition_id)) =
        consumer_target(request, topic, &target.consumer, target.partition_id, usage)?
    else {
        return Ok(None);
    };
    let (key, owner) = partition_key(request.context, stream, topic, partition_id)?;
    Ok(Some(OffsetRoute {
        consumer,
        partition_id,
        key,
        owner,
    }))
}

/// Store and delete need a partition the caller owns (§6.5).
fn owned_route(route: Option<OffsetRoute>) -> Handled<OffsetRoute> {
    route.ok_or(HandlerError::Status(Status::ConsumerGroupPartitionNotOwned))
}

pub(crate) async fn get_offset(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    target: &OffsetTarget<'_>,
) -> Handled<Outcome> {
    let Some(OffsetRoute {
        consumer,
        partition_id,
        key,
        owner,
    }) = offset_route(request, principal, target, Use::Read)?
    else {
        return Ok(request.replier.empty());
    };
    let stored = partition_op(request.context, owner, |reply| PartitionOp::GetOffset {
        key,
        consumer,
        reply,
    })
    .await?;
    let mut out = Vec::new();
    if let Some(stored) = stored {
        encode_consumer_offset(
            &mut out,
            &ConsumerOffsetInfo {
                partition_id,
                current_offset: stored.current_offset,
                stored_offset: stored.stored_offset,
            },
        );
    }
    // Empty body = no offset stored (§6.5).
    Ok(request.replier.ok(&out))
}

/// Store or delete the caller's offset on the owner of a partition it
/// owns (§6.5); the partition it went to.
async fn write_offset(
    request: &Request_<'_>,
    principal: &Principal<'_>,
    target: &OffsetTarget<'_>,
    make: impl FnOnce(PartitionKey, ConsumerKey, Reply<()>) -> PartitionOp,
) -> Handled<u32> {
    let OffsetRoute {
        consumer,
        partition_id,
        key,
        owner,
    } = owned_route(offset_route(request, principal, target, Use::Write)?)?;
    partition_op(request.context, owner, |reply| make(key, consumer, reply)).await?;
    Ok(partition_id)
}

pub(crate) async fn store_offset(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    target: &OffsetTarget<'_>,
    offset: u64,
) -> Handled<Outcome> {
    let partition_id = write_offset(request, principal, target, |key, consumer, reply| {
        PartitionOp::StoreOffset {
            key,
            consumer,
            offset,
            reply,
        }
    })
    .await?;
    let view = request.view.clone();
    let (stream, topic) = named_topic(&view, &target.stream, &target.topic)?;
    if let Some(ids) = super::groups::group_of(stream.id, topic, &target.consumer) {
        super::groups::after_commit(request, ids, partition_id, offset).await;
    }
    Ok(request.replier.empty())
}

pub(crate) async fn delete_offset(
    request: &Request_<'_>,
    principal: &Principal<'_>,
    target: &OffsetTarget<'_>,
) -> Handled<Outcome> {
    write_offset(request, principal, target, |key, consumer, reply| {
        PartitionOp::DeleteOffset {
            key,
            consumer,
            reply,
        }
    })
    .await?;
    Ok(request.replier.empty())
}
