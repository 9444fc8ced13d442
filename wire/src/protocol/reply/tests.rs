//! Tests of the reply encoders: frames, result sections, evictions and
//! every body layout against the byte offsets of the protocol reference.

use super::*;
use crate::protocol::codes::Operation;
use crate::protocol::options::ValueKind;
use crate::protocol::primitives::UserStatus;

fn request(operation: Operation, command_code: u32) -> RequestHeader {
    RequestHeader {
        client: 0xC11E,
        request: 3,
        ..RequestHeader::client_request(operation as u8, command_code, 0)
    }
}

fn body(frame: &[u8]) -> &[u8] {
    &frame[HEADER_SIZE..]
}

fn reply_header(frame: &[u8]) -> ReplyHeader {
    ReplyHeader::decode(frame[..HEADER_SIZE].try_into().unwrap())
}

// Proves the §12 ping reply: header only, command 8, op 2, status 0.
#[test]
fn ping_reply_is_header_only() {
    let frame = encode_reply(&request(Operation::NonReplicated, 1), Status::Ok, &[], 0, 0).unwrap();
    assert_eq!(frame.len(), 256);
    assert_eq!(frame[60], 8);
    assert_eq!(frame[208], 2);
    assert_eq!(&frame[216..220], &[0, 0, 0, 0]);
    assert_eq!(&frame[48..52], &256u32.to_le_bytes());
}

// Proves the result-section rules of §2.7: success gets a 4-byte zero
// prefix (even with no payload), errors get an empty body, rejections a
// 12-byte section, and non-framed operations no prefix at all.
#[test]
fn result_section_rules() {
    let create = request(Operation::CreateStream, 0);
    let frame = encode_reply(&create, Status::Ok, &[7, 7], 5, 5).unwrap();
    assert_eq!(body(&frame), &[0, 0, 0, 0, 7, 7]);
    assert_eq!(reply_header(&frame).size, 262);
    let frame = encode_reply(&create, Status::Ok, &[], 5, 5).unwrap();
    assert_eq!(body(&frame), &[0, 0, 0, 0]);
    let frame = encode_reply(&create, Status::StreamNameAlreadyExists, &[7, 7], 5, 5).unwrap();
    assert_eq!(body(&frame), &[] as &[u8]);
    assert_eq!(reply_header(&frame).status, 1012);
    let frame = encode_rejection(&create, Status::StreamNameAlreadyExists, 5, 5);
    assert_eq!(body(&frame), &[1, 0, 0, 0, 0, 0, 0, 0, 0xF4, 0x03, 0, 0]);
    assert_eq!(reply_header(&frame).status, 0);

    let send = request(Operation::SendMessages, 0);
    let frame = encode_reply(&send, Status::Ok, &[1, 2], 5, 5).unwrap();
    assert_eq!(body(&frame), &[1, 2]);
    let frame = encode_rejection(&send, Status::InvalidMessageChecksum, 5, 5);
    assert_eq!(body(&frame), &[] as &[u8]);
    assert_eq!(reply_header(&frame).status, 4027);
    let logout = request(Operation::Logout, 0);
    assert_eq!(
        encode_reply(&logout, Status::Ok, &[], 5, 5).unwrap().len(),
        256
    );

    let too_big = vec![0u8; BODY_SIZE_MAX + 1];
    assert!(matches!(
        encode_reply(&send, Status::Ok, &too_big, 0, 0),
        Err(WireError::ReplyTooLarge { .. })
    ));
}

// Proves decode errors turn into the right bytes: status, eviction, or nothing.
#[test]
fn errors_become_replies_evictions_or_close() {
    let header = request(Operation::NonReplicated, 999);
    let frame = encode_error(&header, &WireError::UnknownCommand { code: 999 }, 0, 0).unwrap();
    assert_eq!(reply_header(&frame).status, 3);
    assert_eq!(frame[60], 8);
    let login = request(Operation::Register, 0);
    let frame = encode_error(
        &login,
        &WireError::IncompatibleProtocol { version: 1 },
        0,
        0,
    )
    .unwrap();
    assert_eq!(frame.len(), 256);
    assert_eq!(frame[60], 13);
    assert_eq!(frame[255], 14);
    assert_eq!(&frame[144..148], &[0, 0x2C, 0, 0]);
    assert_eq!(
        encode_error(&header, &WireError::FrameSize { size: 1 }, 0, 0),
        None
    );
}

// Proves the login reply body of §12 byte for byte.
#[test]
fn login_reply_body() {
    let mut payload = Vec::new();
    encode_login(
        &mut payload,
        &LoginReply {
            user_id: 0,
            session: NonZeroU64::new(0x0102).unwrap(),
            server_protocol_version: 0x2C00,
            server_version: "0.11.0",
        },
    );
    let frame = encode_reply(
        &request(Operation::Register, 0),
        Status::Ok,
        &payload,
        0x0102,
        0x0102,
    )
    .unwrap();
    let mut expected = vec![
        0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x01, 0, 0, 0, 0, 0, 0, 0x00, 0x2C, 0, 0, 6,
    ];
    expected.extend_from_slice(b"0.11.0");
    assert_eq!(body(&frame), &expected[..]);
    assert_eq!(reply_header(&frame).op, 0x0102);
    assert_eq!(frame[208], 1);
}

// Proves every Stats field sits at its §7.6 offset and the tail layout.
#[test]
fn stats_offsets() {
    let metric = CacheMetric {
        stream_id: 1,
        topic_id: 2,
        partition_id: 3,
        hits: 4,
        misses: 5,
        hit_ratio: 0.5,
    };
    let stats = Stats {
        process_id: 11,
        cpu_usage: 1.5,
        total_cpu_usage: 2.5,
        memory_usage_bytes: 12,
        total_memory_bytes: 20,
        available_memory_bytes: 28,
        run_time_us: 36,
        start_time_us: 44,
        read_bytes: 52,
        written_bytes: 60,
        messages_size_bytes: 68,
        streams_count: 76,
        topics_count: 80,
        partitions_count: 84,
        segments_count: 88,
        messages_count: 92,
        clients_count: 100,
        consumer_groups_count: 104,
        hostname: "h",
        os_name: "linux",
        os_version: "1",
        kernel_version: "6.1",
        server_version: "0.1.0",
        server_semver: 1_000,
        cache_metrics: &[metric],
        threads_count: 4,
        free_disk_space_bytes: 7,
        total_disk_space_bytes: 8,
    };
    let mut out = Vec::new();
    encode_stats(&mut out, &stats);
    let u32_at = |at: usize| u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(out[at..at + 8].try_into().unwrap());
    assert_eq!(u32_at(0), 11);
    assert_eq!(f32::from_le_bytes(out[4..8].try_into().unwrap()), 1.5);
    assert_eq!(f32::from_le_bytes(out[8..12].try_into().unwrap()), 2.5);
    for at in [12usize, 20, 28, 36, 44, 52, 60, 68, 92] {
        assert_eq!(u64_at(at), at as u64, "u64 at {at}");
    }
    for at in [76usize, 80, 84, 88, 100, 104] {
        assert_eq!(u32_at(at), at as u32, "u32 at {at}");
    }
    // Strings start right after the 108 fixed bytes.
    assert_eq!(u32_at(108), 1);
    assert_eq!(out[112], b'h');
    let strings = 5 * 4 + 1 + 5 + 1 + 3 + 5;
    let tail = 108 + strings;
    assert_eq!(u32_at(tail), 1_000);
    assert_eq!(u32_at(tail + 4), 1);
    assert_eq!(u32_at(tail + 8), 1);
    assert_eq!(u64_at(tail + 20), 4);
    assert_eq!(
        f32::from_le_bytes(out[tail + 36..tail + 40].try_into().unwrap()),
        0.5
    );
    assert_eq!(u32_at(tail + 40), 4);
    assert_eq!(u64_at(tail + 44), 7);
    assert_eq!(u64_at(tail + 52), 8);
    assert_eq!(out.len(), tail + 60);
}

// Proves the Stream, TopicHeader and Partition layouts of §7.1/§7.2:
// stream name at 32, topic compression at 24 and name at 49, 40-byte
// partitions, counts derived from the slices.
#[test]
fn stream_topic_partition_layouts() {
    let derived = [OptionEntry {
        key: "durability",
        kind: ValueKind::String as u8,
        value: b"replicated",
    }];
    let topic = TopicInfo {
        id: 1,
        created_at_us: 2,
        partitions_count: 99,
        message_expiry: u64::MAX,
        compression: CompressionAlgorithm::Gzip,
        max_topic_size: u64::MAX,
        size_bytes: 3,
        messages_count: 4,
        name: "t1",
        explicit_options: &[],
        derived_options: &derived,
    };
    let partitions = [PartitionInfo {
        id: 0,
        created_at_us: 5,
        segments_count: 1,
        current_offset: 6,
        size_bytes: 7,
        messages_count: 8,
    }; 2];
    let mut out = Vec::new();
    encode_topic_details(&mut out, &topic, &partitions);
    assert_eq!(
        &out[12..16],
        &2u32.to_le_bytes(),
        "partitions_count from the slice"
    );
    assert_eq!(&out[16..24], &u64::MAX.to_le_bytes());
    assert_eq!(out[24], 2);
    assert_eq!(&out[25..33], &u64::MAX.to_le_bytes());
    assert_eq!(&out[33..41], &3u64.to_le_bytes());
    assert_eq!(&out[41..49], &4u64.to_le_bytes());
    assert_eq!(&out[49..52], &[2, b't', b'1']);
    assert_eq!(&out[52..56], &[0, 0, 0, 0], "explicit block empty");
    let derived_len = u32::from_le_bytes(out[56..60].try_into().unwrap()) as usize;
    assert_eq!(derived_len, 5 + 10 + 5 + 10);
    let header_len = 60 + derived_len;
    assert_eq!(out.len(), header_len + 2 * 40);
    let partition = &out[header_len..header_len + 40];
    assert_eq!(&partition[12..16], &1u32.to_le_bytes());
    assert_eq!(&partition[16..24], &6u64.to_le_bytes());
    assert_eq!(&partition[32..40], &8u64.to_le_bytes());

    let stream = StreamInfo {
        id: 7,
        created_at_us: 8,
        topics_count: 0,
        size_bytes: 9,
        messages_count: 10,
        name: "s1",
        options: &[],
    };
    let mut out = Vec::new();
    encode_stream_details(&mut out, &stream, &[topic]);
    assert_eq!(&out[0..4], &7u32.to_le_bytes());
    assert_eq!(
        &out[12..16],
        &1u32.to_le_bytes(),
        "topics_count from the slice"
    );
    assert_eq!(&out[32..35], &[2, b's', b'1']);
    assert_eq!(&out[35..39], &[0, 0, 0, 0]);
    assert_eq!(out.len(), 39 + header_len);
    let mut list = Vec::new();
    encode_topics(&mut list, &[topic, topic]);
    assert_eq!(&list[..4], &2u32.to_le_bytes());
}

// Proves group, user, client and small reply layouts byte for byte.
#[test]
fn small_reply_layouts() {
    let mut out = Vec::new();
    let group = ConsumerGroupInfo {
        id: 1,
        partitions_count: 3,
        members_count: 0,
        name: "g",
    };
    encode_consumer_group_details(
        &mut out,
        &group,
        &[GroupMember {
            id: 0,
            partitions: &[0, 2],
        }],
    );
    assert_eq!(
        out,
        [
            1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 1, b'g', 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0,
            0, 0
        ]
    );

    let mut out = Vec::new();
    encode_group_assignment(&mut out, 5, &[1]);
    assert_eq!(out, [5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]);

    let user = UserInfo {
        id: 0,
        created_at_us: 1,
        status: UserStatus::Active,
        username: "iggy",
        options: &[],
    };
    let mut out = Vec::new();
    encode_user_details(&mut out, &user, None);
    assert_eq!(out.len(), 4 + 8 + 1 + 5 + 4 + 4);
    assert_eq!(out[12], 1);
    assert_eq!(&out[13..18], &[4, b'i', b'g', b'g', b'y']);
    assert_eq!(&out[22..], &[0, 0, 0, 0]);

    let client = ClientInfo {
        client_id: 2,
        user_id: None,
        transport: Transport::Tcp,
        address: "1.2.3.4:5",
        consumer_groups_count: 9,
    };
    let mut out = Vec::new();
    encode_client_details(
        &mut out,
        &client,
        &[ClientGroup {
            stream_id: 1,
            topic_id: 2,
            group_id: 3,
        }],
    );
    assert_eq!(&out[4..8], &u32::MAX.to_le_bytes());
    assert_eq!(out[8], 1);
    assert_eq!(&out[9..13], &9u32.to_le_bytes());
    assert_eq!(&out[13..22], b"1.2.3.4:5");
    assert_eq!(
        &out[22..26],
        &1u32.to_le_bytes(),
        "groups count from the slice"
    );
    assert_eq!(out.len(), 26 + 12);

    let mut out = Vec::new();
    encode_poll_prefix(&mut out, 1, 2, 3);
    assert_eq!(out.len(), POLL_PREFIX_SIZE);
    assert_eq!(out, [1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0]);

    let mut out = Vec::new();
    encode_send_confirmations(
        &mut out,
        &[SendConfirmation {
            stream_id: 1,
            topic_id: 2,
            partition_id: 3,
            base_offset: 4,
        }],
    );
    assert_eq!(
        out,
        [
            1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0
        ]
    );

    let mut out = Vec::new();
    encode_consumer_offset(
        &mut out,
        &ConsumerOffsetInfo {
            partition_id: 1,
            current_offset: 9,
            stored_offset: 8,
        },
    );
    assert_eq!(out.len(), 20);
    assert_eq!(&out[12..20], &8u64.to_le_bytes());

    let mut out = Vec::new();
    encode_personal_access_tokens(
        &mut out,
        &[PersonalAccessTokenInfo {
            name: "pat",
            expiry_at_us: None,
        }],
    );
    assert_eq!(out, [3, b'p', b'a', b't', 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut out = Vec::new();
    encode_created_token(&mut out, "tok");
    assert_eq!(out, [3, b't', b'o', b'k']);

    let mut out = Vec::new();
    encode_option_descriptions(
        &mut out,
        &[OptionDescription {
            key: "k",
            kind: ValueKind::Bool as u8,
            default: &[0],
            description: "d",
        }],
    );
    assert_eq!(
        out,
        [1, 0, 0, 0, 1, b'k', 3, 1, 0, 0, 0, 0, 1, 0, 0, 0, b'd']
    );
}

// Proves the cluster metadata layout is built from the roster slice.
#[test]
fn cluster_metadata_layout() {
    let node = ClusterNode::tcp_leader("iggy-node", "127.0.0.1", 8090);
    let mut out = Vec::new();
    encode_cluster_metadata(&mut out, "single-node", &[node]);
    let mut expected = Vec::new();
    expected.extend_from_slice(&11u32.to_le_bytes());
    expected.extend_from_slice(b"single-node");
    expected.extend_from_slice(&1u32.to_le_bytes());
    expected.extend_from_slice(&9u32.to_le_bytes());
    expected.extend_from_slice(b"iggy-node");
    expected.extend_from_slice(&9u32.to_le_bytes());
    expected.extend_from_slice(b"127.0.0.1");
    expected.extend_from_slice(&8090u16.to_le_bytes());
    expected.extend_from_slice(&[0; 6]);
    expected.extend_from_slice(&[0, 0]);
    assert_eq!(out, expected);
    let mut two = Vec::new();
    encode_cluster_metadata(
        &mut two,
        "c",
        &[
            node,
            ClusterNode {
                role: NodeRole::Follower,
                ..node
            },
        ],
    );
    assert_eq!(&two[5..9], &2u32.to_le_bytes());
}
