//! What shard 0 checks before a command is journaled, besides the command's
//! own rules in `apply`: the operator's bounds on what low-privilege users
//! can make metadata hold (consumer groups per topic, members per group),
//! the size of one journal record, and the size of the whole state, so that
//! a snapshot is never written larger than the loader accepts
//! (`limits::SNAPSHOT_MAX_BYTES` is that one number).
//!
//! Must not: run inside `Metadata::apply`. Replay re-applies journaled
//! commands with whatever bounds are configured then; a bound lowered after
//! a restart limits new requests only, it never makes replay disagree.

use super::command::{Applied, GroupRef, MetadataCommand};
use super::error::MetadataError;
use super::model::Metadata;
use crate::limits::{
    GROUP_MEMBERS_DEFAULT, GROUP_MEMBERS_MAX, GROUPS_PER_TOPIC_DEFAULT, GROUPS_PER_TOPIC_MAX,
    METADATA_COMMAND_GROWTH_MAX_BYTES, METADATA_RECORD_BYTES_DEFAULT, RECORD_PAYLOAD_MAX_BYTES,
    SNAPSHOT_MAX_BYTES,
};

/// The bounds in force: the defaults of `limits.rs` unless the store was
/// given others ([`super::MetadataStore::set_admission`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    pub groups_per_topic: usize,
    pub members_per_group: usize,
    /// Largest journal record payload (≤ what the journal loader accepts).
    pub record_bytes: usize,
    /// Largest encoded state (≤ what the snapshot loader accepts).
    pub state_bytes: usize,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            groups_per_topic: GROUPS_PER_TOPIC_DEFAULT,
            members_per_group: GROUP_MEMBERS_DEFAULT,
            record_bytes: usize::try_from(METADATA_RECORD_BYTES_DEFAULT)
                .unwrap_or(RECORD_PAYLOAD_MAX_BYTES),
            state_bytes: SNAPSHOT_MAX_BYTES,
        }
    }
}

impl Admission {
    /// Clamps every bound to what the loaders accept, so no configuration
    /// can let through what a restart would refuse.
    pub fn clamped(self) -> Admission {
        Admission {
            groups_per_topic: self.groups_per_topic.clamp(1, GROUPS_PER_TOPIC_MAX),
            members_per_group: self.members_per_group.clamp(1, GROUP_MEMBERS_MAX),
            record_bytes: self.record_bytes.min(RECORD_PAYLOAD_MAX_BYTES),
            state_bytes: self.state_bytes.min(SNAPSHOT_MAX_BYTES),
        }
    }

    /// Checks `command` against the bounds, given the state it would
    /// change and the size of its journal record.
    pub fn check(
        &self,
        metadata: &Metadata,
        state_bytes: usize,
        command: &MetadataCommand,
        record_bytes: usize,
    ) -> Result<(), MetadataError> {
        if record_bytes > self.record_bytes {
            return Err(MetadataError::RecordTooLarge {
                bytes: record_bytes,
                max: self.record_bytes,
            });
        }
        // A command grows the state by at most its own record plus what it
        // creates from counts (partitions); refusing before the apply keeps
        // every acknowledged state snapshottable.
        let grown = state_bytes
            .saturating_add(record_bytes)
            .saturating_add(METADATA_COMMAND_GROWTH_MAX_BYTES);
        if grown > self.state_bytes {
            return Err(MetadataError::MetadataFull {
                bytes: state_bytes,
                max: self.state_bytes,
            });
        }
        match command {
            MetadataCommand::CreateConsumerGroup { stream, topic, .. } => {
                let (_, topic) = metadata.topic(stream, topic)?;
                if topic.groups.len() >= self.groups_per_topic {
                    return Err(MetadataError::TooManyConsumerGroups {
                        topic_id: topic.id,
                        max: self.groups_per_topic,
                    });
                }
            }
            MetadataCommand::JoinConsumerGroup {
                stream,
                topic,
                group,
                member,
            } => {
                let (_, topic) = metadata.topic(stream, topic)?;
                if let Some(group) = topic.group(group)
                    && group.member(*member).is_none()
                    && group.members.len() >= self.members_per_group
                {
                    return Err(MetadataError::ConsumerGroupFull {
                        group_id: group.id,
                        max: self.members_per_group,
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Metadata {
    /// The answer to a command that would change nothing, so that it is
    /// neither applied nor journaled: a join by a member already in the
    /// group (clients repeat joins; each one used to cost an fdatasync and
    /// a full copy of the state), or hand-offs already completed.
    pub fn unchanged_by(&self, command: &MetadataCommand) -> Option<Applied> {
        if let MetadataCommand::CompleteMoves {
            stream,
            topic,
            group,
            partitions,
        } = command
        {
            // Hand-offs another request completed already.
            let (stream, topic) = self.topic(stream, topic).ok()?;
            let group = topic.group(group)?;
            if super::groups::any_pending(group, partitions) {
                return None;
            }
            return Some(Applied::MovesCompleted {
                group: GroupRef {
                    stream_id: stream.id,
                    topic_id: topic.id,
                    group_id: group.id,
                    generation: group.generation,
                },
            });
        }
        let MetadataCommand::JoinConsumerGroup {
            stream,
            topic,
            group,
            member,
        } = command
        else {
            return None;
        };
        let (stream, topic) = self.topic(stream, topic).ok()?;
        let group = topic.group(group)?;
        group.member(*member)?;
        Some(Applied::GroupJoined {
            group: GroupRef {
                stream_id: stream.id,
                topic_id: topic.id,
                group_id: group.id,
                generation: group.generation,
            },
            changed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::SimDirIo;
    use crate::{ExecuteError, Ident, MetadataStore, TopicOptions};

    fn store() -> MetadataStore<SimDirIo> {
        MetadataStore::open(SimDirIo::new(3)).unwrap().0
    }

    fn rejected(result: Result<Applied, ExecuteError>) -> MetadataError {
        match result {
            Err(ExecuteError::Rejected(error)) => error,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    fn topic(store: &mut MetadataStore<SimDirIo>) {
        store
            .execute(MetadataCommand::CreateStream {
                name: "s".into(),
                created_at_us: 1,
            })
            .unwrap();
        store
            .execute(MetadataCommand::CreateTopic {
                stream: Ident::Id(0),
                name: "t".into(),
                partitions_count: 2,
                options: TopicOptions::defaults(crate::Durability::Persisted),
                created_at_us: 1,
                shard_count: 1,
            })
            .unwrap();
    }

    fn group(name: &str) -> MetadataCommand {
        MetadataCommand::CreateConsumerGroup {
            stream: Ident::Id(0),
            topic: Ident::Id(0),
            name: name.into(),
        }
    }

    fn join(member: u128) -> MetadataCommand {
        MetadataCommand::JoinConsumerGroup {
            stream: Ident::Id(0),
            topic: Ident::Id(0),
            group: Ident::Id(0),
            member: crate::MemberKey(member),
        }
    }

    // Proves the bounds hold before anything is journaled: groups per topic,
    // members per group, and a repeated join that is answered without a
    // journal record.
    #[test]
    fn groups_and_members_are_bounded_and_repeated_joins_are_free() {
        let mut store = store();
        store.set_admission(Admission {
            groups_per_topic: 2,
            members_per_group: 2,
            ..Admission::default()
        });
        topic(&mut store);
        store.execute(group("a")).unwrap();
        store.execute(group("b")).unwrap();
        assert!(matches!(
            rejected(store.execute(group("c"))),
            MetadataError::TooManyConsumerGroups { max: 2, .. }
        ));
        store.execute(join(1)).unwrap();
        let seq = store.last_seq();
        let version = store.metadata().applied_commands();
        for _ in 0..10 {
            assert!(matches!(
                store.execute(join(1)).unwrap(),
                Applied::GroupJoined { changed: false, .. }
            ));
        }
        assert_eq!(store.last_seq(), seq, "a repeated join was journaled");
        assert_eq!(store.metadata().applied_commands(), version);
        store.execute(join(2)).unwrap();
        assert!(matches!(
            rejected(store.execute(join(3))),
            MetadataError::ConsumerGroupFull { max: 2, .. }
        ));
    }

    // Proves the state never grows past the snapshot limit: with a small
    // limit, commands are refused before they are applied, and the
    // snapshot written afterwards is within the limit and loads again.
    #[test]
    fn the_state_stays_within_the_snapshot_limit() {
        let mut store = store();
        let limit = METADATA_COMMAND_GROWTH_MAX_BYTES + 4 * 1024;
        store.set_admission(Admission {
            state_bytes: limit,
            ..Admission::default()
        });
        let mut refused = false;
        for index in 0..1_000 {
            let result = store.execute(MetadataCommand::CreateStream {
                name: format!("stream-with-a-long-name-{index:04}"),
                created_at_us: 1,
            });
            if let Err(ExecuteError::Rejected(MetadataError::MetadataFull { .. })) = result {
                refused = true;
                break;
            }
            result.unwrap();
        }
        assert!(refused, "the state limit never refused a command");
        store.snapshot().unwrap();
        let bytes = crate::snapshot::Snapshot {
            seq: store.last_seq(),
            metadata: store.metadata().clone(),
        }
        .encode()
        .unwrap();
        assert!(bytes.len() <= limit);
    }

    // Proves an oversized record (a permissions block larger than the
    // admitted record size) is a typed rejection, not the journal's
    // assertion, and leaves the journal as it was.
    #[test]
    fn an_oversized_record_is_refused() {
        use iggyd_wire::protocol::permissions::{Permissions, StreamPermissions};
        let mut store = store();
        store.set_admission(Admission {
            record_bytes: 4096,
            ..Admission::default()
        });
        let permissions = Permissions {
            streams: (0..1_000)
                .map(|stream_id| StreamPermissions {
                    stream_id,
                    ..StreamPermissions::default()
                })
                .collect(),
            ..Permissions::default()
        };
        let seq = store.last_seq();
        assert!(matches!(
            rejected(store.execute(MetadataCommand::CreateUser {
                username: "mallory".into(),
                password_hash: String::new(),
                status: crate::UserStatus::Active,
                permissions: Some(permissions),
                created_at_us: 1,
            })),
            MetadataError::RecordTooLarge { max: 4096, .. }
        ));
        assert_eq!(store.last_seq(), seq);
    }
}
