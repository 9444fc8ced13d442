//! Consumer groups: reads and Sync from the view; create, delete, join and
//! leave through shard 0. Membership is keyed by the session, and the
//! session remembers what it joined so a logout or disconnect leaves.

use super::{Handled, Outcome, Request_, apply, member_key, named_topic, prepare_and_apply};
use crate::net::context::NetContext;
use crate::net::session::{Membership, Session};
use iggyd_metadata::permissions::Principal;
use iggyd_metadata::{Applied, ConsumerGroup, Ident, MetadataCommand, MetadataView, Topic, groups};
use iggyd_wire::protocol::command::{Command, GroupRef, NotSend};
use iggyd_wire::protocol::primitives::Identifier;
use iggyd_wire::protocol::reply::{
    ConsumerGroupInfo, GroupMember, encode_consumer_group, encode_consumer_group_details,
    encode_group_assignment,
};
use std::rc::Rc;
use std::sync::Arc;

fn encode_details(out: &mut Vec<u8>, topic: &Topic, group: &ConsumerGroup) {
    let members: Vec<GroupMember<'_>> = group
        .members
        .iter()
        .enumerate()
        .map(|(slot, member)| GroupMember {
            id: slot as u32,
            partitions: &member.partitions,
        })
        .collect();
    let info = ConsumerGroupInfo {
        id: group.id,
        partitions_count: topic.partitions_count(),
        members_count: members.len() as u32,
        name: &group.name,
    };
    encode_consumer_group_details(out, &info, &members);
}

pub(crate) fn get_group(
    request: &Request_<'_>,
    principal: &Principal<'_>,
    group: &GroupRef<'_>,
) -> Handled<Outcome> {
    let (stream, topic) = named_topic(&request.view, &group.stream, &group.topic)?;
    principal.consumer_groups(stream.id, topic.id)?;
    let mut out = Vec::new();
    if let Some(found) = topic.group(&Ident::from(&group.group)) {
        encode_details(&mut out, topic, found);
    }
    Ok(request.replier.ok(&out))
}

pub(crate) fn get_groups(
    request: &Request_<'_>,
    principal: &Principal<'_>,
    stream: Identifier<'_>,
    topic: Identifier<'_>,
) -> Handled<Outcome> {
    let (stream, topic) = named_topic(&request.view, &stream, &topic)?;
    principal.consumer_groups(stream.id, topic.id)?;
    let mut out = Vec::new();
    for group in topic.groups.values() {
        encode_consumer_group(
            &mut out,
            &ConsumerGroupInfo {
                id: group.id,
                partitions_count: topic.partitions_count(),
                members_count: group.members.len() as u32,
                name: &group.name,
            },
        );
    }
    Ok(request.replier.ok(&out))
}

/// Hand the pending `partitions` of `group` to the members promised them
/// (shard 0 ignores any another request handed over already). A failure is
/// logged: the hand-off is retried by the next request that finds it due.
pub(crate) async fn complete_handoffs(
    request: &mut Request_<'_>,
    ids: (u32, u32, u32),
    partitions: Vec<u32>,
) {
    if let Some(view) = hand_over(request.context, ids, partitions).await {
        request.view = view;
    }
}

async fn hand_over(
    context: &Rc<NetContext>,
    (stream_id, topic_id, group_id): (u32, u32, u32),
    partitions: Vec<u32>,
) -> Option<Arc<MetadataView>> {
    if partitions.is_empty() {
        return None;
    }
    let command = MetadataCommand::CompleteMoves {
        stream: Ident::Id(stream_id),
        topic: Ident::Id(topic_id),
        group: Ident::Id(group_id),
        partitions,
    };
    match apply(context, command).await {
        Ok((_, view)) => Some(view),
        Err(error) => {
            tracing::warn!(
                status = error.status().code(),
                "completing a consumer-group hand-off failed"
            );
            None
        }
    }
}

/// Any request of a member (its SDK pings every 5 s) lets go of the
/// partitions it must hand off and has committed everything it polled
/// from: a member that is idle, or that commits before it polls again,
/// hands over without waiting for the timeout.
pub(crate) async fn release_handoffs(context: &Rc<NetContext>, session: &Session) {
    if session.memberships.is_empty() {
        return;
    }
    let view = context.view();
    let me = member_key(session);
    for membership in &session.memberships {
        let ids = (membership.stream, membership.topic, membership.group);
        let Some(group) = group_in(&view, ids) else {
            continue;
        };
        if group.pending.is_empty() {
            continue;
        }
        let owned = group.assignment(me).unwrap_or_default();
        let ready: Vec<u32> = group
            .pending
            .iter()
            .map(|pending| pending.partition)
            .filter(|partition| owned.contains(partition))
            .filter(|partition| {
                session
                    .progress
                    .get(&(*membership, *partition))
                    .is_none_or(|progress| progress.caught_up())
            })
            .collect();
        hand_over(context, ids, ready).await;
    }
}

/// Hand-offs to the caller that waited out the rebalance timeout: their
/// old owner never committed what it polled, so the caller takes them now
/// (and may re-read what was not committed).
pub(crate) async fn complete_due_handoffs(
    request: &mut Request_<'_>,
    (stream_id, topic_id): (u32, u32),
    group: &ConsumerGroup,
) {
    let me = member_key(request.session);
    let pending: Vec<u32> = groups::pending_to(group, me).collect();
    if pending.is_empty() {
        return;
    }
    let due = request
        .context
        .handoffs_due((stream_id, topic_id, group.id), me.0, &pending);
    complete_handoffs(request, (stream_id, topic_id, group.id), due).await;
}

/// The group `consumer` names in `topic`, when it is a group consumer and
/// the group exists: `(stream, topic, group)` ids.
pub(crate) fn group_of(
    stream_id: u32,
    topic: &Topic,
    consumer: &iggyd_wire::protocol::primitives::Consumer<'_>,
) -> Option<(u32, u32, u32)> {
    if consumer.kind != iggyd_wire::protocol::primitives::ConsumerKind::ConsumerGroup {
        return None;
    }
    let group = topic.group(&Ident::from(&consumer.id))?;
    Some((stream_id, topic.id, group.id))
}

fn group_in(
    view: &MetadataView,
    (stream_id, topic_id, group_id): (u32, u32, u32),
) -> Option<&ConsumerGroup> {
    view.stream_by_id(stream_id)?
        .topic_by_id(topic_id)?
        .groups
        .get(&group_id)
}

/// Before a member polls: hand-offs to it that are due complete.
pub(crate) async fn before_poll(request: &mut Request_<'_>, ids: (u32, u32, u32)) {
    let view = request.view.clone();
    if let Some(group) = group_in(&view, ids) {
        complete_due_handoffs(request, (ids.0, ids.1), group).await;
    }
}

/// When `partition` is pending a hand-off away from the caller (its
/// owner) and the caller has committed everything it polled from it, the
/// hand-off completes: true, and the caller's poll answers "not yours" so
/// its SDK syncs the new assignment.
pub(crate) async fn hand_off_if_caught_up(
    request: &mut Request_<'_>,
    ids: (u32, u32, u32),
    partition: u32,
) -> bool {
    let view = request.view.clone();
    let Some(group) = group_in(&view, ids) else {
        return false;
    };
    let me = member_key(request.session);
    let owner = group
        .assignment(me)
        .is_some_and(|partitions| partitions.contains(&partition));
    if !owner || group.pending_move(partition).is_none() {
        return false;
    }
    let progress = request
        .session
        .progress
        .get(&(membership(ids), partition))
        .copied()
        .unwrap_or_default();
    if !progress.caught_up() {
        return false;
    }
    complete_handoffs(request, ids, vec![partition]).await;
    true
}

fn membership((stream, topic, group): (u32, u32, u32)) -> Membership {
    Membership {
        stream,
        topic,
        group,
    }
}

/// After a member was served up to `last_offset` from `partition` (and,
/// with auto-commit, committed it).
pub(crate) fn record_poll(
    session: &mut crate::net::session::Session,
    ids: (u32, u32, u32),
    partition: u32,
    last_offset: Option<u64>,
    auto_commit: bool,
) {
    let Some(last_offset) = last_offset else {
        return;
    };
    let progress = session
        .progress
        .entry((membership(ids), partition))
        .or_default();
    progress.polled = Some(
        progress
            .polled
            .map_or(last_offset, |polled| polled.max(last_offset)),
    );
    if auto_commit {
        progress.committed = Some(last_offset);
    }
}

/// After a member stored `offset` for `partition`: a pending hand-off of
/// it completes when that commits everything the member polled.
pub(crate) async fn after_commit(
    request: &mut Request_<'_>,
    ids: (u32, u32, u32),
    partition: u32,
    offset: u64,
) {
    request
        .session
        .progress
        .entry((membership(ids), partition))
        .or_default()
        .committed = Some(offset);
    hand_off_if_caught_up(request, ids, partition).await;
}

/// The caller's own assignment; empty body when it is not a member. A
/// hand-off to the caller that is due completes first.
pub(crate) async fn sync(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    group: &GroupRef<'_>,
) -> Handled<Outcome> {
    let view = request.view.clone();
    let (stream, topic) = named_topic(&view, &group.stream, &group.topic)?;
    principal.consumer_groups(stream.id, topic.id)?;
    if let Some(found) = topic.group(&Ident::from(&group.group)) {
        complete_due_handoffs(request, (stream.id, topic.id), found).await;
    }
    let view = request.view.clone();
    let (_, topic) = named_topic(&view, &group.stream, &group.topic)?;
    let mut out = Vec::new();
    if let Some(found) = topic.group(&Ident::from(&group.group))
        && let Some(partitions) = found.assignment(member_key(request.session))
    {
        encode_group_assignment(&mut out, found.generation, partitions);
    }
    Ok(request.replier.ok(&out))
}

pub(crate) async fn change(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    command: NotSend<'_>,
) -> Handled<Outcome> {
    let view = request.view.clone();
    let (stream, topic) = match &command {
        Command::CreateConsumerGroup { stream, topic, .. } => (stream, topic),
        Command::DeleteConsumerGroup(group)
        | Command::JoinConsumerGroup(group)
        | Command::LeaveConsumerGroup(group) => (&group.stream, &group.topic),
        _ => {
            return Ok(request
                .replier
                .status(iggyd_wire::protocol::codes::Status::InvalidCommand));
        }
    };
    let (stream, topic) = named_topic(&view, stream, topic)?;
    principal.consumer_groups(stream.id, topic.id)?;
    // A join by a session that is already a member changes nothing: it is
    // answered from the view, without shard 0, a journal write or a new
    // view (clients repeat joins; a hostile one could loop on them).
    if let Command::JoinConsumerGroup(group) = &command
        && let Some(found) = topic.group(&Ident::from(&group.group))
        && found.member(member_key(request.session)).is_some()
    {
        return Ok(request.replier.ok(&[]));
    }
    let (applied, view, _) = prepare_and_apply(request, &command).await?;
    let mut out = Vec::new();
    match applied {
        Applied::GroupCreated {
            stream_id,
            topic_id,
            group_id,
        } => {
            if let Some(topic) = view
                .stream_by_id(stream_id)
                .and_then(|stream| stream.topic_by_id(topic_id))
                && let Some(group) = topic.groups.get(&group_id)
            {
                encode_details(&mut out, topic, group);
            }
        }
        Applied::GroupJoined { group, .. } => {
            request.session.memberships.insert(Membership {
                stream: group.stream_id,
                topic: group.topic_id,
                group: group.group_id,
            });
        }
        Applied::GroupLeft { group } => {
            let left = Membership {
                stream: group.stream_id,
                topic: group.topic_id,
                group: group.group_id,
            };
            request.session.memberships.remove(&left);
            request
                .session
                .progress
                .retain(|(membership, _), _| *membership != left);
        }
        _ => {}
    }
    let memberships = request.session.memberships.iter().copied().collect();
    request.context.update_client(
        request.session.client_id,
        request.session.user_id(),
        memberships,
    );
    Ok(request.replier.ok(&out))
}
