//! Consumer groups: reads and Sync from the view; create, delete, join and
//! leave through shard 0. Membership is keyed by the session, and the
//! session remembers what it joined so a logout or disconnect leaves.

use super::{Handled, Outcome, Request_, member_key, prepare_and_apply};
use crate::metadata::permissions::Principal;
use crate::metadata::{Applied, ConsumerGroup, Ident, Topic};
use crate::net::session::Membership;
use crate::protocol::command::{Command, GroupRef};
use crate::protocol::primitives::Identifier;
use crate::protocol::reply::{
    ConsumerGroupInfo, GroupMember, encode_consumer_group, encode_consumer_group_details,
    encode_group_assignment,
};

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
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    group: &GroupRef<'_>,
) -> Handled<Outcome> {
    let view = request.view.clone();
    let (stream, topic) = view.topic(&Ident::from(&group.stream), &Ident::from(&group.topic))?;
    principal.consumer_groups(stream.id, topic.id)?;
    let mut out = Vec::new();
    if let Some(found) = topic.group(&Ident::from(&group.group)) {
        encode_details(&mut out, topic, found);
    }
    Ok(request.replier.ok(&out))
}

pub(crate) fn get_groups(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    stream: Identifier<'_>,
    topic: Identifier<'_>,
) -> Handled<Outcome> {
    let view = request.view.clone();
    let (stream, topic) = view.topic(&Ident::from(&stream), &Ident::from(&topic))?;
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

/// The caller's own assignment; empty body when it is not a member.
pub(crate) fn sync(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    group: &GroupRef<'_>,
) -> Handled<Outcome> {
    let view = request.view.clone();
    let (stream, topic) = view.topic(&Ident::from(&group.stream), &Ident::from(&group.topic))?;
    principal.consumer_groups(stream.id, topic.id)?;
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
    command: Command<'_>,
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
                .status(crate::protocol::codes::Status::InvalidCommand));
        }
    };
    let (stream, topic) = view.topic(&Ident::from(stream), &Ident::from(topic))?;
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
            request.session.memberships.remove(&Membership {
                stream: group.stream_id,
                topic: group.topic_id,
                group: group.group_id,
            });
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
