//! Permission rules (§8.1, after Apache's permissioner): pure functions from
//! (who is asking, what they ask for) to allowed or 41 Unauthorized.
//!
//! Must not: look anything up (the caller resolves stream/topic ids first,
//! so "not found" is answered before "not allowed" the same way Apache
//! does for ids the caller may read), or treat absent permissions as
//! anything but "no rights". The root user (id 0) may do everything,
//! whatever its stored permissions say.
//!
//! Classes: server info; users (with the "yourself" rules for GetUser and
//! ChangePassword); streams; topics; partitions and segments (= topic
//! write); consumer groups (= topic read); poll and offsets; send. Personal
//! access tokens are always the caller's own and need only a login.

use super::ROOT_USER_ID;
use super::error::MetadataError;
use super::model::User;
use iggyd_wire::protocol::permissions::{
    GlobalPermissions, Permissions, StreamPermissions, TopicPermissions,
};

/// The logged-in user a request is checked for.
#[derive(Debug, Clone, Copy)]
pub struct Principal<'a> {
    pub user_id: u32,
    pub permissions: Option<&'a Permissions>,
}

fn allow(allowed: bool) -> Result<(), MetadataError> {
    if allowed {
        Ok(())
    } else {
        Err(MetadataError::Unauthorized)
    }
}

impl<'a> Principal<'a> {
    pub fn of(user: &'a User) -> Self {
        Self {
            user_id: user.id,
            permissions: user.permissions.as_ref(),
        }
    }

    fn is_root(&self) -> bool {
        self.user_id == ROOT_USER_ID
    }

    /// Checks a rule with root short-circuiting; no permissions = nothing.
    fn check(&self, rule: impl FnOnce(&Permissions) -> bool) -> Result<(), MetadataError> {
        allow(self.is_root() || self.permissions.is_some_and(rule))
    }

    // --- server -------------------------------------------------------

    /// GetStats, GetClients, GetClient, GetSnapshot.
    pub fn read_server(&self) -> Result<(), MetadataError> {
        self.check(|p| p.global.manage_servers || p.global.read_servers)
    }

    // --- users --------------------------------------------------------

    /// GetUser: yourself always; others need read_users or manage_users.
    pub fn get_user(&self, target_user_id: u32) -> Result<(), MetadataError> {
        if target_user_id == self.user_id {
            return Ok(());
        }
        self.get_users()
    }

    /// GetUsers.
    pub fn get_users(&self) -> Result<(), MetadataError> {
        self.check(|p| p.global.manage_users || p.global.read_users)
    }

    /// CreateUser, UpdateUser, DeleteUser, UpdatePermissions.
    pub fn manage_users(&self) -> Result<(), MetadataError> {
        self.check(|p| p.global.manage_users)
    }

    /// ChangePassword: yourself always; others need manage_users.
    pub fn change_password(&self, target_user_id: u32) -> Result<(), MetadataError> {
        if target_user_id == self.user_id {
            return Ok(());
        }
        self.manage_users()
    }

    // --- streams ------------------------------------------------------

    /// GetStreams.
    pub fn get_streams(&self) -> Result<(), MetadataError> {
        self.check(|p| p.global.manage_streams || p.global.read_streams)
    }

    /// GetStream: global read/manage streams or that stream's read/manage.
    pub fn get_stream(&self, stream_id: u32) -> Result<(), MetadataError> {
        self.check(|p| {
            p.global.manage_streams
                || p.global.read_streams
                || stream(p, stream_id).is_some_and(|s| s.manage_stream || s.read_stream)
        })
    }

    /// CreateStream: global manage_streams only.
    pub fn create_stream(&self) -> Result<(), MetadataError> {
        self.check(|p| p.global.manage_streams)
    }

    /// UpdateStream, DeleteStream, PurgeStream.
    pub fn manage_stream(&self, stream_id: u32) -> Result<(), MetadataError> {
        self.check(|p| {
            p.global.manage_streams || stream(p, stream_id).is_some_and(|s| s.manage_stream)
        })
    }

    // --- topics -------------------------------------------------------

    /// GetTopics of a stream.
    pub fn get_topics(&self, stream_id: u32) -> Result<(), MetadataError> {
        self.check(|p| {
            global_read_topics(&p.global) || stream(p, stream_id).is_some_and(stream_read_topics)
        })
    }

    /// GetTopic; also the consumer-group operations (= topic read).
    pub fn get_topic(&self, stream_id: u32, topic_id: u32) -> Result<(), MetadataError> {
        self.check(|p| {
            global_read_topics(&p.global)
                || stream(p, stream_id).is_some_and(|s| {
                    stream_read_topics(s)
                        || topic(s, topic_id).is_some_and(|t| t.manage_topic || t.read_topic)
                })
        })
    }

    /// CreateTopic in a stream.
    pub fn create_topic(&self, stream_id: u32) -> Result<(), MetadataError> {
        self.check(|p| {
            global_manage_topics(&p.global)
                || stream(p, stream_id).is_some_and(stream_manage_topics)
        })
    }

    /// UpdateTopic, DeleteTopic, PurgeTopic; also CreatePartitions,
    /// DeletePartitions and DeleteSegments (= topic write).
    pub fn manage_topic(&self, stream_id: u32, topic_id: u32) -> Result<(), MetadataError> {
        self.check(|p| {
            global_manage_topics(&p.global)
                || stream(p, stream_id).is_some_and(|s| {
                    stream_manage_topics(s) || topic(s, topic_id).is_some_and(|t| t.manage_topic)
                })
        })
    }

    /// Partitions and segments are topic write.
    pub fn manage_partitions(&self, stream_id: u32, topic_id: u32) -> Result<(), MetadataError> {
        self.manage_topic(stream_id, topic_id)
    }

    /// Consumer groups (create, delete, get, list, join, leave, sync) are
    /// topic read.
    pub fn consumer_groups(&self, stream_id: u32, topic_id: u32) -> Result<(), MetadataError> {
        self.get_topic(stream_id, topic_id)
    }

    // --- messages -----------------------------------------------------

    /// PollMessages and Get/Store/DeleteConsumerOffset: any read-ish right
    /// on the stream or topic, or poll_messages at any level.
    pub fn poll_messages(&self, stream_id: u32, topic_id: u32) -> Result<(), MetadataError> {
        self.check(|p| {
            global_read_topics(&p.global)
                || p.global.poll_messages
                || stream(p, stream_id).is_some_and(|s| {
                    stream_read_topics(s)
                        || s.poll_messages
                        || topic(s, topic_id)
                            .is_some_and(|t| t.manage_topic || t.read_topic || t.poll_messages)
                })
        })
    }

    /// SendMessages: manage or send rights at any level.
    pub fn send_messages(&self, stream_id: u32, topic_id: u32) -> Result<(), MetadataError> {
        self.check(|p| {
            global_manage_topics(&p.global)
                || p.global.send_messages
                || stream(p, stream_id).is_some_and(|s| {
                    stream_manage_topics(s)
                        || s.send_messages
                        || topic(s, topic_id).is_some_and(|t| t.manage_topic || t.send_messages)
                })
        })
    }
}

fn stream(permissions: &Permissions, stream_id: u32) -> Option<&StreamPermissions> {
    permissions
        .streams
        .iter()
        .find(|stream| stream.stream_id == stream_id)
}

fn topic(stream: &StreamPermissions, topic_id: u32) -> Option<&TopicPermissions> {
    stream
        .topics
        .iter()
        .find(|topic| topic.topic_id == topic_id)
}

fn global_read_topics(global: &GlobalPermissions) -> bool {
    global.manage_streams || global.read_streams || global.manage_topics || global.read_topics
}

fn global_manage_topics(global: &GlobalPermissions) -> bool {
    global.manage_streams || global.manage_topics
}

fn stream_read_topics(stream: &StreamPermissions) -> bool {
    stream.manage_stream || stream.read_stream || stream.manage_topics || stream.read_topics
}

fn stream_manage_topics(stream: &StreamPermissions) -> bool {
    stream.manage_stream || stream.manage_topics
}

/// Every global right: what the root user is created with.
pub fn all_permissions() -> Permissions {
    Permissions {
        global: GlobalPermissions {
            manage_servers: true,
            read_servers: true,
            manage_users: true,
            read_users: true,
            manage_streams: true,
            read_streams: true,
            manage_topics: true,
            read_topics: true,
            poll_messages: true,
            send_messages: true,
        },
        streams: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: u32 = 3;
    const OTHER_STREAM: u32 = 4;
    const TOPIC: u32 = 7;
    const OTHER_TOPIC: u32 = 8;
    const USER: u32 = 5;

    /// Every operation class, evaluated for one principal, in a fixed order.
    fn matrix(principal: &Principal<'_>) -> Vec<(&'static str, bool)> {
        vec![
            ("read_server", principal.read_server().is_ok()),
            ("get_user_self", principal.get_user(USER).is_ok()),
            ("get_user_other", principal.get_user(99).is_ok()),
            ("get_users", principal.get_users().is_ok()),
            ("manage_users", principal.manage_users().is_ok()),
            (
                "change_password_self",
                principal.change_password(USER).is_ok(),
            ),
            (
                "change_password_other",
                principal.change_password(99).is_ok(),
            ),
            ("get_streams", principal.get_streams().is_ok()),
            ("get_stream", principal.get_stream(STREAM).is_ok()),
            (
                "get_other_stream",
                principal.get_stream(OTHER_STREAM).is_ok(),
            ),
            ("create_stream", principal.create_stream().is_ok()),
            ("manage_stream", principal.manage_stream(STREAM).is_ok()),
            ("get_topics", principal.get_topics(STREAM).is_ok()),
            ("get_topic", principal.get_topic(STREAM, TOPIC).is_ok()),
            (
                "get_other_topic",
                principal.get_topic(STREAM, OTHER_TOPIC).is_ok(),
            ),
            ("create_topic", principal.create_topic(STREAM).is_ok()),
            (
                "manage_topic",
                principal.manage_topic(STREAM, TOPIC).is_ok(),
            ),
            (
                "partitions",
                principal.manage_partitions(STREAM, TOPIC).is_ok(),
            ),
            ("groups", principal.consumer_groups(STREAM, TOPIC).is_ok()),
            ("poll", principal.poll_messages(STREAM, TOPIC).is_ok()),
            (
                "poll_other_stream",
                principal.poll_messages(OTHER_STREAM, TOPIC).is_ok(),
            ),
            ("send", principal.send_messages(STREAM, TOPIC).is_ok()),
            (
                "send_other_topic",
                principal.send_messages(STREAM, OTHER_TOPIC).is_ok(),
            ),
        ]
    }

    /// The operations a principal may do, by name.
    fn allowed(permissions: Option<&Permissions>) -> Vec<&'static str> {
        let principal = Principal {
            user_id: USER,
            permissions,
        };
        matrix(&principal)
            .into_iter()
            .filter(|(_, ok)| *ok)
            .map(|(name, _)| name)
            .collect()
    }

    fn global(edit: impl FnOnce(&mut GlobalPermissions)) -> Permissions {
        let mut permissions = Permissions::default();
        edit(&mut permissions.global);
        permissions
    }

    fn per_stream(edit: impl FnOnce(&mut StreamPermissions)) -> Permissions {
        let mut stream = StreamPermissions {
            stream_id: STREAM,
            ..Default::default()
        };
        edit(&mut stream);
        Permissions {
            global: GlobalPermissions::default(),
            streams: vec![stream],
        }
    }

    fn per_topic(edit: impl FnOnce(&mut TopicPermissions)) -> Permissions {
        let mut topic = TopicPermissions {
            topic_id: TOPIC,
            ..Default::default()
        };
        edit(&mut topic);
        per_stream(|stream| stream.topics.push(topic))
    }

    const SELF_ONLY: [&str; 2] = ["get_user_self", "change_password_self"];

    fn with_self(extra: &[&'static str]) -> Vec<&'static str> {
        let mut all: Vec<&'static str> = SELF_ONLY.to_vec();
        all.extend_from_slice(extra);
        let order: Vec<&str> = matrix(&Principal {
            user_id: 0,
            permissions: None,
        })
        .into_iter()
        .map(|(name, _)| name)
        .collect();
        all.sort_by_key(|name| order.iter().position(|other| other == name));
        all
    }

    // Proves root may do everything even with no stored permissions, and a
    // user with no permissions only the "yourself" operations.
    #[test]
    fn root_and_nobody() {
        let root = Principal {
            user_id: ROOT_USER_ID,
            permissions: None,
        };
        assert!(matrix(&root).iter().all(|(_, ok)| *ok));
        assert_eq!(allowed(None), with_self(&[]));
        assert_eq!(allowed(Some(&Permissions::default())), with_self(&[]));
        let everything = all_permissions();
        assert!(
            matrix(&Principal {
                user_id: USER,
                permissions: Some(&everything)
            })
            .iter()
            .all(|(_, ok)| *ok)
        );
    }

    /// What reading a stream's topics opens (per stream; the global flag
    /// adds `poll_other_stream`).
    const TOPICS_READ: [&str; 5] = [
        "get_topics",
        "get_topic",
        "get_other_topic",
        "groups",
        "poll",
    ];
    /// What managing topics opens beyond reading them.
    const TOPICS_MANAGE: [&str; 5] = [
        "create_topic",
        "manage_topic",
        "partitions",
        "send",
        "send_other_topic",
    ];

    /// Checks each case: the permissions allow exactly the expected
    /// operations (plus the "yourself" ones).
    fn assert_cases(cases: Vec<(Permissions, Vec<&'static str>)>) {
        for (permissions, expected) in cases {
            assert_eq!(
                allowed(Some(&permissions)),
                with_self(&expected),
                "{permissions:?}"
            );
        }
    }

    // Proves each global flag grants exactly its row of §8.1.
    #[test]
    fn global_flags() {
        let topics_read = [&TOPICS_READ[..], &["poll_other_stream"]].concat();
        let streams_manage = [
            "get_streams",
            "get_stream",
            "get_other_stream",
            "create_stream",
            "manage_stream",
        ];
        assert_cases(vec![
            (global(|g| g.manage_servers = true), vec!["read_server"]),
            (global(|g| g.read_servers = true), vec!["read_server"]),
            (
                global(|g| g.manage_users = true),
                vec![
                    "get_user_other",
                    "get_users",
                    "manage_users",
                    "change_password_other",
                ],
            ),
            (
                global(|g| g.read_users = true),
                vec!["get_user_other", "get_users"],
            ),
            (
                global(|g| g.manage_streams = true),
                [&streams_manage[..], &topics_read, &TOPICS_MANAGE].concat(),
            ),
            (
                global(|g| g.read_streams = true),
                [
                    &["get_streams", "get_stream", "get_other_stream"][..],
                    &topics_read,
                ]
                .concat(),
            ),
            (
                global(|g| g.manage_topics = true),
                [&topics_read[..], &TOPICS_MANAGE].concat(),
            ),
            (global(|g| g.read_topics = true), topics_read.clone()),
            (
                global(|g| g.poll_messages = true),
                vec!["poll", "poll_other_stream"],
            ),
            (
                global(|g| g.send_messages = true),
                vec!["send", "send_other_topic"],
            ),
        ]);
    }

    // Proves per-stream flags apply to that stream only, and which
    // operations each one opens.
    #[test]
    fn stream_flags() {
        assert_cases(vec![
            (
                per_stream(|s| s.manage_stream = true),
                [
                    &["get_stream", "manage_stream"][..],
                    &TOPICS_READ,
                    &TOPICS_MANAGE,
                ]
                .concat(),
            ),
            (
                per_stream(|s| s.read_stream = true),
                [&["get_stream"][..], &TOPICS_READ].concat(),
            ),
            (
                per_stream(|s| s.manage_topics = true),
                [&TOPICS_READ[..], &TOPICS_MANAGE].concat(),
            ),
            (per_stream(|s| s.read_topics = true), TOPICS_READ.to_vec()),
            (per_stream(|s| s.poll_messages = true), vec!["poll"]),
            (
                per_stream(|s| s.send_messages = true),
                vec!["send", "send_other_topic"],
            ),
        ]);
    }

    // Proves per-topic flags apply to that topic only.
    #[test]
    fn topic_flags() {
        assert_cases(vec![
            (
                per_topic(|t| t.manage_topic = true),
                vec![
                    "get_topic",
                    "manage_topic",
                    "partitions",
                    "groups",
                    "poll",
                    "send",
                ],
            ),
            (
                per_topic(|t| t.read_topic = true),
                vec!["get_topic", "groups", "poll"],
            ),
            (per_topic(|t| t.poll_messages = true), vec!["poll"]),
            (per_topic(|t| t.send_messages = true), vec!["send"]),
        ]);
    }
}
