//! `Metadata::apply`: validates one [`MetadataCommand`] against the current
//! state and, only if every check passes, applies it. The only code that
//! mutates [`Metadata`].
//!
//! Must not: read the clock, draw randomness, hash, or do I/O — everything
//! is in the command — and must not leave a half-applied change: each arm
//! checks first and mutates last, so an `Err` means the state is untouched.
//! Id rules (§8 item 2): streams, topics and users take the lowest free id;
//! partitions are appended after the highest and removed from the top;
//! consumer-group ids come from a per-topic counter and are never reused.
//! Partition storage ids (which name the data directories) come from one
//! counter in the model and are never reused either, so reused wire ids
//! never share storage.

use std::collections::BTreeMap;

use super::ROOT_USER_ID;
use super::command::{Applied, GroupRef, Ident, MetadataCommand, PartitionRef};
use super::error::MetadataError;
use super::groups;
use super::model::{
    ConsumerGroup, Member, Metadata, Partition, PersonalAccessToken, Stream, Topic, User,
    UserStatus, lowest_free_id,
};
use crate::limits::{
    GROUP_MEMBERS_MAX, PARTITION_ID_SPACE, PAT_NAME_LEN_MAX, PAT_NAME_LEN_MIN, PATS_PER_USER_MAX,
    STREAMS_MAX, TOPICS_PER_STREAM_MAX, USERNAME_LEN_MAX, USERNAME_LEN_MIN,
};
use iggyd_wire::protocol::limits::{NAME_LEN_MAX, NAME_LEN_MIN, PARTITIONS_PER_REQUEST_MAX};

fn name_ok(name: &str) -> bool {
    (NAME_LEN_MIN..=NAME_LEN_MAX).contains(&name.len())
}

/// Checks a username's length (3..=50 characters) → 43.
pub fn validate_username(username: &str) -> Result<(), MetadataError> {
    let len = username.chars().count();
    if (USERNAME_LEN_MIN..=USERNAME_LEN_MAX).contains(&len) && username.len() <= NAME_LEN_MAX {
        Ok(())
    } else {
        Err(MetadataError::InvalidUsername { len })
    }
}

fn check_partitions_request(count: u32, min: u32) -> Result<(), MetadataError> {
    if (min..=PARTITIONS_PER_REQUEST_MAX).contains(&count) {
        Ok(())
    } else {
        Err(MetadataError::TooManyPartitions {
            count,
            min,
            max: PARTITIONS_PER_REQUEST_MAX,
        })
    }
}

/// Picks owners for `count` new partitions: each goes to the shard with
/// the fewest partitions so far (counting the ones just placed), ties to
/// the lowest shard id.
fn place_partitions(counts: &mut [u64], count: u32) -> Vec<usize> {
    assert!(!counts.is_empty(), "placement needs at least one shard");
    let mut owners = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for _ in 0..count {
        let mut best = 0usize;
        for (shard, load) in counts.iter().enumerate() {
            if *load < counts.get(best).copied().unwrap_or(u64::MAX) {
                best = shard;
            }
        }
        if let Some(load) = counts.get_mut(best) {
            *load += 1;
        }
        owners.push(best);
    }
    owners
}

fn partition_refs(stream_id: u32, topic: &Topic, from: usize) -> Vec<PartitionRef> {
    topic
        .partitions
        .iter()
        .skip(from)
        .map(|partition| PartitionRef {
            stream_id,
            topic_id: topic.id,
            partition_id: partition.id,
            owner_shard: partition.owner_shard,
            storage_id: partition.storage_id,
        })
        .collect()
}

/// Rebalances every group of a topic after its partition count changed.
fn rebalance_topic(stream_id: u32, topic: &mut Topic) -> Vec<GroupRef> {
    let partitions = topic.partitions.len();
    let topic_id = topic.id;
    topic
        .groups
        .values_mut()
        .map(|group| {
            groups::rebalance(group, partitions);
            GroupRef {
                stream_id,
                topic_id,
                group_id: group.id,
                generation: group.generation,
            }
        })
        .collect()
}

impl Metadata {
    /// Validates and applies one command. On `Err` nothing changed.
    pub fn apply(&mut self, command: MetadataCommand) -> Result<Applied, MetadataError> {
        let applied = self.apply_inner(command)?;
        self.applied_commands += 1;
        Ok(applied)
    }

    /// The version the command being applied publishes: a number no
    /// earlier change had, and no later one will.
    fn next_version(&self) -> u64 {
        self.applied_commands + 1
    }

    fn apply_inner(&mut self, command: MetadataCommand) -> Result<Applied, MetadataError> {
        use MetadataCommand as C;
        match command {
            C::CreateStream {
                name,
                created_at_us,
            } => self.create_stream(name, created_at_us),
            C::UpdateStream { stream, name } => self.update_stream(&stream, name),
            C::DeleteStream { stream } => self.delete_stream(&stream),
            C::CreateTopic {
                stream,
                name,
                partitions_count,
                options,
                created_at_us,
                shard_count,
            } => self.create_topic(
                &stream,
                name,
                partitions_count,
                options,
                created_at_us,
                shard_count,
            ),
            C::UpdateTopic {
                stream,
                topic,
                name,
                update,
            } => {
                let (stream_id, topic_id) = self.topic_ids(&stream, &topic)?;
                if !name_ok(&name) {
                    return Err(MetadataError::InvalidTopicName { len: name.len() });
                }
                let stream = self.stream_mut(stream_id)?;
                if stream
                    .topics
                    .values()
                    .any(|other| other.name == name && other.id != topic_id)
                {
                    return Err(MetadataError::TopicNameAlreadyExists { stream_id, name });
                }
                let topic = topic_mut(stream, topic_id)?;
                let options = topic.options.updated(&update)?;
                topic.options = options;
                topic.name = name;
                Ok(Applied::TopicUpdated {
                    stream_id,
                    topic_id,
                })
            }
            C::DeleteTopic { stream, topic } => {
                let (stream_id, topic_id) = self.topic_ids(&stream, &topic)?;
                let stream = self.stream_mut(stream_id)?;
                let removed = stream
                    .topics
                    .remove(&topic_id)
                    .map(|topic| partition_refs(stream_id, &topic, 0))
                    .unwrap_or_default();
                Ok(Applied::TopicDeleted {
                    stream_id,
                    topic_id,
                    removed,
                })
            }
            C::CreatePartitions {
                stream,
                topic,
                count,
                created_at_us,
                shard_count,
            } => self.create_partitions(&stream, &topic, count, created_at_us, shard_count),
            C::DeletePartitions {
                stream,
                topic,
                count,
            } => {
                check_partitions_request(count, 1)?;
                let (stream_id, topic_id) = self.topic_ids(&stream, &topic)?;
                let topic = topic_mut(self.stream_mut(stream_id)?, topic_id)?;
                let existing = topic.partitions_count();
                if count > existing {
                    return Err(MetadataError::InvalidPartitionsCount {
                        requested: count,
                        existing,
                    });
                }
                let keep = usize::try_from(existing - count).unwrap_or(0);
                let removed = partition_refs(stream_id, topic, keep);
                topic.partitions.truncate(keep);
                let rebalanced = rebalance_topic(stream_id, topic);
                Ok(Applied::PartitionsDeleted {
                    removed,
                    rebalanced,
                })
            }
            C::CreateUser {
                username,
                password_hash,
                status,
                permissions,
                created_at_us,
            } => {
                validate_username(&username)?;
                if self.user_names.contains_key(&username) {
                    return Err(MetadataError::UserAlreadyExists { username });
                }
                let user_id =
                    lowest_free_id(&self.users).ok_or(MetadataError::UserAlreadyExists {
                        username: username.clone(),
                    })?;
                self.user_names.insert(username.clone(), user_id);
                self.users.insert(
                    user_id,
                    User {
                        id: user_id,
                        username,
                        password_hash,
                        status,
                        permissions,
                        created_at_us,
                        tokens: BTreeMap::new(),
                        incarnation: self.next_version(),
                    },
                );
                Ok(Applied::UserCreated { user_id })
            }
            C::UpdateUser {
                user,
                username,
                status,
            } => {
                let user_id = self.user(&user)?.id;
                if let Some(username) = &username {
                    validate_username(username)?;
                    if self
                        .user_names
                        .get(username)
                        .is_some_and(|other| *other != user_id)
                    {
                        return Err(MetadataError::UserAlreadyExists {
                            username: username.clone(),
                        });
                    }
                }
                let incarnation = self.next_version();
                let user = self.user_mut(user_id)?;
                let old_name = user.username.clone();
                if let Some(status) = status {
                    if status == UserStatus::Inactive && user.status == UserStatus::Active {
                        user.incarnation = incarnation;
                    }
                    user.status = status;
                }
                if let Some(username) = username {
                    user.username = username.clone();
                    self.user_names.remove(&old_name);
                    self.user_names.insert(username, user_id);
                }
                Ok(Applied::UserUpdated { user_id })
            }
            C::DeleteUser { user } => {
                let user_id = self.user(&user)?.id;
                if user_id == ROOT_USER_ID {
                    return Err(MetadataError::CannotDeleteUser);
                }
                if let Some(user) = self.users.remove(&user_id) {
                    self.user_names.remove(&user.username);
                    for token in user.tokens.values() {
                        self.token_hashes.remove(&token.token_hash);
                    }
                }
                Ok(Applied::UserDeleted { user_id })
            }
            C::ChangePassword {
                user,
                password_hash,
            } => {
                let user_id = self.user(&user)?.id;
                self.user_mut(user_id)?.password_hash = password_hash;
                Ok(Applied::PasswordChanged { user_id })
            }
            C::UpdatePermissions { user, permissions } => {
                let user_id = self.user(&user)?.id;
                if user_id == ROOT_USER_ID {
                    return Err(MetadataError::CannotChangePermissions);
                }
                let incarnation = self.next_version();
                let user = self.user_mut(user_id)?;
                // Withdrawing every permission ends the account's sessions.
                if permissions.is_none() && user.permissions.is_some() {
                    user.incarnation = incarnation;
                }
                user.permissions = permissions;
                Ok(Applied::PermissionsUpdated { user_id })
            }
            C::CreatePat {
                user_id,
                name,
                token_hash,
                expiry_at_us,
                created_at_us,
            } => {
                let len = name.chars().count();
                if !(PAT_NAME_LEN_MIN..=PAT_NAME_LEN_MAX).contains(&len) {
                    return Err(MetadataError::InvalidPersonalAccessTokenName { len });
                }
                if let Some(expiry) = expiry_at_us
                    && expiry <= created_at_us
                {
                    return Err(MetadataError::InvalidPersonalAccessTokenExpiry {
                        expiry_at_us: expiry,
                        now_us: created_at_us,
                    });
                }
                let user = self
                    .user_by_id(user_id)
                    .ok_or(MetadataError::UserNotFound)?;
                if user.tokens.contains_key(&name) {
                    return Err(MetadataError::PersonalAccessTokenAlreadyExists { name });
                }
                if user.tokens.len() >= PATS_PER_USER_MAX {
                    return Err(MetadataError::PersonalAccessTokensLimitReached {
                        user_id,
                        max: PATS_PER_USER_MAX,
                    });
                }
                // A 256-bit hash of 256 random bits: a collision means the
                // caller reused a token, which must not shadow another user's.
                if self.token_hashes.contains_key(&token_hash) {
                    return Err(MetadataError::InvalidPersonalAccessToken);
                }
                self.token_hashes
                    .insert(token_hash, (user_id, name.clone()));
                self.user_mut(user_id)?.tokens.insert(
                    name.clone(),
                    PersonalAccessToken {
                        name,
                        token_hash,
                        expiry_at_us,
                        created_at_us,
                    },
                );
                Ok(Applied::PatCreated { user_id })
            }
            C::DeletePat { user_id, name } => {
                let user = self.user_mut(user_id)?;
                let token = user
                    .tokens
                    .remove(&name)
                    .ok_or(MetadataError::PersonalAccessTokenNotFound { name })?;
                self.token_hashes.remove(&token.token_hash);
                Ok(Applied::PatDeleted { user_id })
            }
            C::CreateConsumerGroup {
                stream,
                topic,
                name,
            } => {
                let (stream_id, topic_id) = self.topic_ids(&stream, &topic)?;
                if !name_ok(&name) {
                    return Err(MetadataError::InvalidConsumerGroupName { len: name.len() });
                }
                let topic = topic_mut(self.stream_mut(stream_id)?, topic_id)?;
                if topic.group_by_name(&name).is_some() {
                    return Err(MetadataError::ConsumerGroupNameAlreadyExists { name });
                }
                let group_id = topic.next_group_id;
                topic.next_group_id = group_id
                    .checked_add(1)
                    .ok_or(MetadataError::ConsumerGroupIdsExhausted)?;
                topic.groups.insert(
                    group_id,
                    ConsumerGroup {
                        id: group_id,
                        name,
                        members: Vec::new(),
                        generation: 0,
                        pending: Vec::new(),
                    },
                );
                Ok(Applied::GroupCreated {
                    stream_id,
                    topic_id,
                    group_id,
                })
            }
            C::DeleteConsumerGroup {
                stream,
                topic,
                group,
            } => {
                let (stream_id, topic_id, group_id) = self.group_ids(&stream, &topic, &group)?;
                topic_mut(self.stream_mut(stream_id)?, topic_id)?
                    .groups
                    .remove(&group_id);
                Ok(Applied::GroupDeleted {
                    stream_id,
                    topic_id,
                    group_id,
                })
            }
            C::JoinConsumerGroup {
                stream,
                topic,
                group,
                member,
            } => {
                let (group, changed) =
                    self.change_group(&stream, &topic, &group, |group, partitions| {
                        let full = group.members.len() >= GROUP_MEMBERS_MAX;
                        if group.member(member).is_none() && full {
                            return Err(MetadataError::ConsumerGroupFull {
                                group_id: group.id,
                                max: GROUP_MEMBERS_MAX,
                            });
                        }
                        let joining = Member {
                            key: member,
                            partitions: Vec::new(),
                        };
                        Ok(groups::join(group, joining, partitions))
                    })?;
                Ok(Applied::GroupJoined { group, changed })
            }
            C::LeaveConsumerGroup {
                stream,
                topic,
                group,
                member,
            } => {
                let (group, ()) =
                    self.change_group(&stream, &topic, &group, |group, partitions| {
                        let slot = group
                            .members
                            .iter()
                            .position(|candidate| candidate.key == member)
                            .ok_or(MetadataError::ConsumerGroupMemberNotFound {
                                group_id: group.id,
                            })?;
                        group.members.remove(slot);
                        groups::rebalance(group, partitions);
                        Ok(())
                    })?;
                Ok(Applied::GroupLeft { group })
            }
            C::CompleteMoves {
                stream,
                topic,
                group,
                partitions: moved,
            } => {
                let (group, ()) =
                    self.change_group(&stream, &topic, &group, |group, partitions| {
                        groups::complete_moves(group, &moved, partitions);
                        Ok(())
                    })?;
                Ok(Applied::MovesCompleted { group })
            }
            C::MemberGone { member } => Ok(Applied::MembersRemoved {
                groups: self.remove_members(|key| key == member),
            }),
            C::ResetMembers => Ok(Applied::MembersRemoved {
                groups: self.remove_members(|_| true),
            }),
        }
    }

    fn create_stream(
        &mut self,
        name: String,
        created_at_us: u64,
    ) -> Result<Applied, MetadataError> {
        if !name_ok(&name) {
            return Err(MetadataError::InvalidStreamName { len: name.len() });
        }
        if self.stream_names.contains_key(&name) {
            return Err(MetadataError::StreamNameAlreadyExists { name });
        }
        let too_many = MetadataError::TooManyStreams { max: STREAMS_MAX };
        if self.streams.len() >= STREAMS_MAX {
            return Err(too_many);
        }
        let stream_id = lowest_free_id(&self.streams).ok_or(too_many)?;
        self.stream_names.insert(name.clone(), stream_id);
        self.streams.insert(
            stream_id,
            Stream {
                id: stream_id,
                name,
                created_at_us,
                topics: BTreeMap::new(),
            },
        );
        Ok(Applied::StreamCreated { stream_id })
    }

    fn update_stream(&mut self, stream: &Ident, name: String) -> Result<Applied, MetadataError> {
        let stream_id = self.stream(stream)?.id;
        if !name_ok(&name) {
            return Err(MetadataError::InvalidStreamName { len: name.len() });
        }
        if self
            .stream_names
            .get(&name)
            .is_some_and(|other| *other != stream_id)
        {
            return Err(MetadataError::StreamNameAlreadyExists { name });
        }
        let stream = self.stream_mut(stream_id)?;
        let old_name = std::mem::replace(&mut stream.name, name.clone());
        self.stream_names.remove(&old_name);
        self.stream_names.insert(name, stream_id);
        Ok(Applied::StreamUpdated { stream_id })
    }

    fn delete_stream(&mut self, stream: &Ident) -> Result<Applied, MetadataError> {
        let stream_id = self.stream(stream)?.id;
        let removed = match self.streams.remove(&stream_id) {
            Some(stream) => {
                self.stream_names.remove(&stream.name);
                stream
                    .topics
                    .values()
                    .flat_map(|topic| partition_refs(stream_id, topic, 0))
                    .collect()
            }
            None => Vec::new(),
        };
        Ok(Applied::StreamDeleted { stream_id, removed })
    }

    fn create_topic(
        &mut self,
        stream: &Ident,
        name: String,
        partitions_count: u32,
        options: super::options::TopicOptions,
        created_at_us: u64,
        shard_count: u32,
    ) -> Result<Applied, MetadataError> {
        assert!(
            shard_count > 0,
            "a topic's partitions need a shard to live on"
        );
        let stream_id = self.stream(stream)?.id;
        if !name_ok(&name) {
            return Err(MetadataError::InvalidTopicName { len: name.len() });
        }
        check_partitions_request(partitions_count, 0)?;
        options.check_topic_size()?;
        let stream = self
            .stream_by_id(stream_id)
            .ok_or(MetadataError::StreamNotFound {
                stream: stream_id.to_string(),
            })?;
        if stream.topic_by_name(&name).is_some() {
            return Err(MetadataError::TopicNameAlreadyExists { stream_id, name });
        }
        let too_many = MetadataError::TooManyTopics {
            stream_id,
            max: TOPICS_PER_STREAM_MAX,
        };
        if stream.topics.len() >= TOPICS_PER_STREAM_MAX {
            return Err(too_many);
        }
        let topic_id = lowest_free_id(&stream.topics).ok_or(too_many)?;
        let storage_ids = self.storage_ids_for(partitions_count)?;
        let mut counts = self.partitions_per_shard(usize::try_from(shard_count).unwrap_or(1));
        let owners = place_partitions(&mut counts, partitions_count);
        let partitions = (0u32..)
            .zip(owners)
            .zip(storage_ids.clone())
            .map(|((id, owner_shard), storage_id)| Partition {
                id,
                created_at_us,
                owner_shard,
                storage_id,
            })
            .collect();
        let topic = Topic {
            id: topic_id,
            name,
            created_at_us,
            options,
            partitions,
            groups: BTreeMap::new(),
            next_group_id: 0,
        };
        let created = partition_refs(stream_id, &topic, 0);
        self.stream_mut(stream_id)?.topics.insert(topic_id, topic);
        self.next_storage_id = storage_ids.end;
        Ok(Applied::TopicCreated {
            stream_id,
            topic_id,
            created,
        })
    }

    fn create_partitions(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        count: u32,
        created_at_us: u64,
        shard_count: u32,
    ) -> Result<Applied, MetadataError> {
        assert!(shard_count > 0, "partitions need a shard to live on");
        check_partitions_request(count, 1)?;
        let (stream_id, topic_id) = self.topic_ids(stream, topic)?;
        let storage_ids = self.storage_ids_for(count)?;
        let mut counts = self.partitions_per_shard(usize::try_from(shard_count).unwrap_or(1));
        let topic = topic_mut(self.stream_mut(stream_id)?, topic_id)?;
        let existing = topic.partitions_count();
        if existing.saturating_add(count) > PARTITION_ID_SPACE {
            return Err(MetadataError::PartitionIdSpaceExhausted {
                existing,
                requested: count,
                max: PARTITION_ID_SPACE,
            });
        }
        let owners = place_partitions(&mut counts, count);
        for ((id, owner_shard), storage_id) in (existing..).zip(owners).zip(storage_ids.clone()) {
            topic.partitions.push(Partition {
                id,
                created_at_us,
                owner_shard,
                storage_id,
            });
        }
        let created = partition_refs(stream_id, topic, usize::try_from(existing).unwrap_or(0));
        let rebalanced = rebalance_topic(stream_id, topic);
        self.next_storage_id = storage_ids.end;
        Ok(Applied::PartitionsCreated {
            created,
            rebalanced,
        })
    }

    /// The storage ids of `count` new partitions (checked, not yet taken:
    /// the caller moves the counter once nothing else can fail).
    fn storage_ids_for(&self, count: u32) -> Result<std::ops::Range<u64>, MetadataError> {
        let start = self.next_storage_id;
        let end = start
            .checked_add(u64::from(count))
            .ok_or(MetadataError::StorageIdsExhausted)?;
        Ok(start..end)
    }

    fn remove_members(&mut self, gone: impl Fn(super::MemberKey) -> bool) -> Vec<GroupRef> {
        let mut changed = Vec::new();
        for stream in self.streams.values_mut() {
            let stream_id = stream.id;
            for topic in stream.topics.values_mut() {
                let partitions = topic.partitions.len();
                let topic_id = topic.id;
                for group in topic.groups.values_mut() {
                    let before = group.members.len();
                    group.members.retain(|member| !gone(member.key));
                    if group.members.len() != before {
                        groups::rebalance(group, partitions);
                        changed.push(GroupRef {
                            stream_id,
                            topic_id,
                            group_id: group.id,
                            generation: group.generation,
                        });
                    }
                }
            }
        }
        changed
    }

    fn topic_ids(&self, stream: &Ident, topic: &Ident) -> Result<(u32, u32), MetadataError> {
        let (stream, topic) = self.topic(stream, topic)?;
        Ok((stream.id, topic.id))
    }

    /// Runs `change` on the consumer group the request names, given its
    /// topic's partition count; the group as it is afterwards, and what
    /// `change` returned.
    fn change_group<T>(
        &mut self,
        stream: &Ident,
        topic: &Ident,
        group: &Ident,
        change: impl FnOnce(&mut ConsumerGroup, usize) -> Result<T, MetadataError>,
    ) -> Result<(GroupRef, T), MetadataError> {
        let (stream_id, topic_id, group_id) = self.group_ids(stream, topic, group)?;
        let topic = topic_mut(self.stream_mut(stream_id)?, topic_id)?;
        let partitions = topic.partitions.len();
        let group = group_mut(topic, group_id)?;
        let outcome = change(group, partitions)?;
        let changed = GroupRef {
            stream_id,
            topic_id,
            group_id,
            generation: group.generation,
        };
        Ok((changed, outcome))
    }

    fn group_ids(
        &self,
        stream: &Ident,
        topic: &Ident,
        group: &Ident,
    ) -> Result<(u32, u32, u32), MetadataError> {
        let (stream, topic, group) = self.group(stream, topic, group)?;
        Ok((stream.id, topic.id, group.id))
    }

    fn stream_mut(&mut self, stream_id: u32) -> Result<&mut Stream, MetadataError> {
        self.streams
            .get_mut(&stream_id)
            .ok_or_else(|| MetadataError::StreamNotFound {
                stream: stream_id.to_string(),
            })
    }

    fn user_mut(&mut self, user_id: u32) -> Result<&mut User, MetadataError> {
        self.users
            .get_mut(&user_id)
            .ok_or(MetadataError::UserNotFound)
    }
}

fn topic_mut(stream: &mut Stream, topic_id: u32) -> Result<&mut Topic, MetadataError> {
    let stream_id = stream.id;
    stream
        .topics
        .get_mut(&topic_id)
        .ok_or_else(|| MetadataError::TopicNotFound {
            stream_id,
            topic: topic_id.to_string(),
        })
}

fn group_mut(topic: &mut Topic, group_id: u32) -> Result<&mut ConsumerGroup, MetadataError> {
    topic
        .groups
        .get_mut(&group_id)
        .ok_or_else(|| MetadataError::ConsumerGroupNotFound {
            group: group_id.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves storage ids are never reused: a topic deleted and created
    // again under the same name gets the same wire ids, new storage ids
    // (so new, empty directories) and no consumer groups; partitions
    // deleted from the top and added again get new storage ids too.
    #[test]
    fn storage_ids_are_never_reused() {
        use crate::options::{Durability, TopicOptions};
        let mut metadata = Metadata::new();
        let create_topic = |metadata: &mut Metadata| match metadata
            .apply(MetadataCommand::CreateTopic {
                stream: Ident::Id(0),
                name: "t".into(),
                partitions_count: 3,
                options: TopicOptions::defaults(Durability::Persisted),
                created_at_us: 1,
                shard_count: 2,
            })
            .unwrap()
        {
            Applied::TopicCreated {
                topic_id, created, ..
            } => (topic_id, created),
            other => panic!("{other:?}"),
        };
        metadata
            .apply(MetadataCommand::CreateStream {
                name: "s".into(),
                created_at_us: 1,
            })
            .unwrap();
        let (first_id, first) = create_topic(&mut metadata);
        metadata
            .apply(MetadataCommand::CreateConsumerGroup {
                stream: Ident::Id(0),
                topic: Ident::Id(first_id),
                name: "g".into(),
            })
            .unwrap();
        let removed = match metadata
            .apply(MetadataCommand::DeleteTopic {
                stream: Ident::Id(0),
                topic: Ident::Name("t".into()),
            })
            .unwrap()
        {
            Applied::TopicDeleted { removed, .. } => removed,
            other => panic!("{other:?}"),
        };
        assert_eq!(removed, first);
        let (second_id, second) = create_topic(&mut metadata);
        assert_eq!(second_id, first_id, "wire ids are reused");
        let storage = |refs: &[PartitionRef]| refs.iter().map(|r| r.storage_id).collect::<Vec<_>>();
        assert_eq!(storage(&first), vec![0, 1, 2]);
        assert_eq!(storage(&second), vec![3, 4, 5]);
        let topic = metadata
            .stream_by_id(0)
            .unwrap()
            .topic_by_id(second_id)
            .unwrap();
        assert!(topic.groups.is_empty());
        assert_eq!(topic.next_group_id, 0);
        metadata
            .apply(MetadataCommand::DeletePartitions {
                stream: Ident::Id(0),
                topic: Ident::Id(second_id),
                count: 2,
            })
            .unwrap();
        match metadata
            .apply(MetadataCommand::CreatePartitions {
                stream: Ident::Id(0),
                topic: Ident::Id(second_id),
                count: 2,
                created_at_us: 2,
                shard_count: 2,
            })
            .unwrap()
        {
            Applied::PartitionsCreated { created, .. } => {
                assert_eq!(
                    created
                        .iter()
                        .map(|r| (r.partition_id, r.storage_id))
                        .collect::<Vec<_>>(),
                    vec![(1, 6), (2, 7)]
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(metadata.next_storage_id(), 8);
        metadata.check_invariants().unwrap();
    }

    // Proves the placement rule: fewest partitions first, ties to the
    // lowest shard.
    #[test]
    fn placement_fills_the_least_loaded_shard() {
        let mut counts = vec![2, 0, 1];
        assert_eq!(place_partitions(&mut counts, 4), vec![1, 1, 2, 0]);
        assert_eq!(counts, vec![3, 2, 2]);
    }
}
