//! User permissions (§4.10) in both directions, with the `has_next`
//! chaining of per-stream and per-topic entries, and the two wrappers: the
//! request form `[has u8]([len u32][permissions])` and the GetUser/CreateUser
//! reply form (`00 00 00 00` for none, `01 [len u32][permissions]` for some).
//!
//! Booleans are strict 0/1 bytes. Stream ids, and topic ids within a stream,
//! must be unique so that the server can turn the lists into maps without
//! silently dropping an entry.

use super::error::WireError;
use super::reader::{Reader, WireWrite};

/// Server-wide rights: 10 bytes in this exact order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GlobalPermissions {
    pub manage_servers: bool,
    pub read_servers: bool,
    pub manage_users: bool,
    pub read_users: bool,
    pub manage_streams: bool,
    pub read_streams: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

/// Rights on one stream: `[stream_id u32]` + 6 bytes + topic chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct StreamPermissions {
    pub stream_id: u32,
    pub manage_stream: bool,
    pub read_stream: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
    pub topics: Vec<TopicPermissions>,
}

/// Rights on one topic: `[topic_id u32]` + 4 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TopicPermissions {
    pub topic_id: u32,
    pub manage_topic: bool,
    pub read_topic: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

/// The permissions body.
///
/// Layout:
/// ```text
/// [10 × u8 global][has_streams u8]
///   repeat: [stream_id u32][6 × u8][has_topics u8]
///             repeat: [topic_id u32][4 × u8][has_next_topic u8]
///           [has_next_stream u8]
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Permissions {
    pub global: GlobalPermissions,
    pub streams: Vec<StreamPermissions>,
}

fn ensure_unique(mut ids: Vec<u32>, what: &'static str, offset: usize) -> Result<(), WireError> {
    ids.sort_unstable();
    if ids.windows(2).any(|pair| pair.first() == pair.get(1)) {
        return Err(WireError::Malformed {
            what,
            offset,
            reason: "duplicate id in permissions",
        });
    }
    Ok(())
}

impl Permissions {
    /// Decodes exactly `bytes` (the `[len u32]`-delimited permissions).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut reader = Reader::new(bytes);
        let global = GlobalPermissions {
            manage_servers: reader.bool("manage_servers")?,
            read_servers: reader.bool("read_servers")?,
            manage_users: reader.bool("manage_users")?,
            read_users: reader.bool("read_users")?,
            manage_streams: reader.bool("manage_streams")?,
            read_streams: reader.bool("read_streams")?,
            manage_topics: reader.bool("manage_topics")?,
            read_topics: reader.bool("read_topics")?,
            poll_messages: reader.bool("poll_messages")?,
            send_messages: reader.bool("send_messages")?,
        };
        let mut streams = Vec::new();
        let mut more_streams = reader.bool("has_streams")?;
        while more_streams {
            let stream_id = reader.u32("stream permissions id")?;
            let mut stream = StreamPermissions {
                stream_id,
                manage_stream: reader.bool("manage_stream")?,
                read_stream: reader.bool("read_stream")?,
                manage_topics: reader.bool("stream manage_topics")?,
                read_topics: reader.bool("stream read_topics")?,
                poll_messages: reader.bool("stream poll_messages")?,
                send_messages: reader.bool("stream send_messages")?,
                topics: Vec::new(),
            };
            let mut more_topics = reader.bool("has_topics")?;
            while more_topics {
                stream.topics.push(TopicPermissions {
                    topic_id: reader.u32("topic permissions id")?,
                    manage_topic: reader.bool("manage_topic")?,
                    read_topic: reader.bool("read_topic")?,
                    poll_messages: reader.bool("topic poll_messages")?,
                    send_messages: reader.bool("topic send_messages")?,
                });
                more_topics = reader.bool("has_next_topic")?;
            }
            let topic_ids = stream.topics.iter().map(|topic| topic.topic_id).collect();
            ensure_unique(topic_ids, "topic permissions id", reader.position())?;
            streams.push(stream);
            more_streams = reader.bool("has_next_stream")?;
        }
        let stream_ids = streams.iter().map(|stream| stream.stream_id).collect();
        ensure_unique(stream_ids, "stream permissions id", reader.position())?;
        reader.finish("permissions")?;
        Ok(Self { global, streams })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let global = &self.global;
        for flag in [
            global.manage_servers,
            global.read_servers,
            global.manage_users,
            global.read_users,
            global.manage_streams,
            global.read_streams,
            global.manage_topics,
            global.read_topics,
            global.poll_messages,
            global.send_messages,
        ] {
            out.put_bool(flag);
        }
        out.put_bool(!self.streams.is_empty());
        for (stream_index, stream) in self.streams.iter().enumerate() {
            out.put_u32(stream.stream_id);
            for flag in [
                stream.manage_stream,
                stream.read_stream,
                stream.manage_topics,
                stream.read_topics,
                stream.poll_messages,
                stream.send_messages,
            ] {
                out.put_bool(flag);
            }
            out.put_bool(!stream.topics.is_empty());
            for (topic_index, topic) in stream.topics.iter().enumerate() {
                out.put_u32(topic.topic_id);
                for flag in [
                    topic.manage_topic,
                    topic.read_topic,
                    topic.poll_messages,
                    topic.send_messages,
                ] {
                    out.put_bool(flag);
                }
                out.put_bool(topic_index + 1 < stream.topics.len());
            }
            out.put_bool(stream_index + 1 < self.streams.len());
        }
    }

    /// Request wrapper: `[has_permissions u8]` then, if 1, `[len u32][permissions]`.
    pub fn decode_optional(reader: &mut Reader<'_>) -> Result<Option<Self>, WireError> {
        if !reader.bool("has_permissions")? {
            return Ok(None);
        }
        let length = reader.u32("permissions length")?;
        let bytes = reader.bytes(usize::try_from(length).unwrap_or(usize::MAX), "permissions")?;
        Ok(Some(Self::decode(bytes)?))
    }

    /// Request wrapper, encoding side.
    pub fn encode_optional(permissions: Option<&Self>, out: &mut Vec<u8>) {
        match permissions {
            None => out.put_bool(false),
            Some(permissions) => {
                out.put_bool(true);
                let mut body = Vec::new();
                permissions.encode(&mut body);
                out.put_u32_prefixed(&body);
            }
        }
    }

    /// Reply wrapper used after a User (§7.4): `00 00 00 00` for none,
    /// `01 [len u32][permissions]` for some.
    pub fn encode_reply_block(permissions: Option<&Self>, out: &mut Vec<u8>) {
        match permissions {
            None => out.put_u32(0),
            Some(permissions) => Self::encode_optional(Some(permissions), out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Permissions {
        Permissions {
            global: GlobalPermissions {
                read_servers: true,
                poll_messages: true,
                ..Default::default()
            },
            streams: vec![
                StreamPermissions {
                    stream_id: 1,
                    read_stream: true,
                    topics: vec![
                        TopicPermissions {
                            topic_id: 2,
                            send_messages: true,
                            ..Default::default()
                        },
                        TopicPermissions {
                            topic_id: 3,
                            manage_topic: true,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
                StreamPermissions {
                    stream_id: 9,
                    send_messages: true,
                    ..Default::default()
                },
            ],
        }
    }

    // Proves the has_next chaining round-trips at exact byte positions: a
    // stream with two topics then a stream without topics.
    #[test]
    fn permissions_round_trip_with_chaining() {
        let permissions = sample();
        let mut out = Vec::new();
        permissions.encode(&mut out);
        // 10 global + has_streams + (4+6+1 + 2×(4+4+1) + 1) + (4+6+1+1)
        assert_eq!(out.len(), 10 + 1 + 30 + 12);
        assert_eq!(out[10], 1, "has_streams");
        assert_eq!(&out[11..15], &1u32.to_le_bytes());
        assert_eq!(out[21], 1, "has_topics");
        assert_eq!(out[30], 1, "has_next_topic after first topic");
        assert_eq!(out[39], 0, "has_next_topic after last topic");
        assert_eq!(out[40], 1, "has_next_stream after first stream");
        assert_eq!(*out.last().unwrap(), 0, "has_next_stream after last stream");
        assert_eq!(Permissions::decode(&out).unwrap(), permissions);

        let empty = Permissions::default();
        let mut out = Vec::new();
        empty.encode(&mut out);
        assert_eq!(out, [0u8; 11]);
        assert_eq!(Permissions::decode(&out).unwrap(), empty);
    }

    // Proves both wrappers and the rejection of duplicates and trailing bytes.
    #[test]
    fn permissions_wrappers_and_rejections() {
        let permissions = sample();
        for value in [None, Some(&permissions)] {
            let mut out = Vec::new();
            Permissions::encode_optional(value, &mut out);
            let mut reader = Reader::new(&out);
            assert_eq!(
                Permissions::decode_optional(&mut reader).unwrap().as_ref(),
                value
            );
            reader.finish("p").unwrap();
        }
        let mut none = Vec::new();
        Permissions::encode_reply_block(None, &mut none);
        assert_eq!(none, [0, 0, 0, 0]);
        let mut some = Vec::new();
        Permissions::encode_reply_block(Some(&permissions), &mut some);
        assert_eq!(some[0], 1);

        let mut duplicate = permissions.clone();
        duplicate.streams[1].stream_id = 1;
        let mut out = Vec::new();
        duplicate.encode(&mut out);
        assert!(Permissions::decode(&out).is_err());
        let mut out = Vec::new();
        permissions.encode(&mut out);
        out.push(0);
        assert!(matches!(
            Permissions::decode(&out),
            Err(WireError::TrailingBytes { .. })
        ));
    }
}
