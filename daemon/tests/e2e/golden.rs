//! Compatibility with the official SDK's bytes: the request frames in
//! `daemon/tests/golden/frames/` were captured from apache-iggy 0.9.0 (the
//! Python SDK over the Rust core) by `scripts/capture-frames.sh`, with the
//! status of the reply each one got in `manifest.txt`. These tests decode
//! every frame with the codec and replay the whole session against a live
//! daemon. The same frames seed the fuzz corpus (`scripts/fuzz-smoke.sh`).

use std::path::PathBuf;

use iggyd_wire::protocol::codes::CommandCode;
use iggyd_wire::protocol::{Command, decode_frame};

use iggyd_testkit::TestDaemon;
use iggyd_testkit::wire::{connect, exchange};

use crate::request_of::request_of;

fn frames_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/frames")
}

/// One captured frame and the reply it got at capture time.
struct Golden {
    name: String,
    bytes: Vec<u8>,
    reply_command: u8,
    reply_status: u32,
}

fn load() -> Vec<Golden> {
    let manifest = std::fs::read_to_string(frames_dir().join("manifest.txt")).unwrap();
    let golden: Vec<Golden> = manifest
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields.len(), 3, "manifest line {line:?}");
            Golden {
                name: fields[0].to_string(),
                bytes: std::fs::read(frames_dir().join(fields[0])).unwrap(),
                reply_command: fields[1].parse().unwrap(),
                reply_status: fields[2].parse().unwrap(),
            }
        })
        .collect();
    let on_disk = std::fs::read_dir(frames_dir())
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|ext| ext == "bin")
        })
        .count();
    assert_eq!(on_disk, golden.len(), "every .bin is in manifest.txt");
    assert!(golden.len() >= 20, "the capture covers the session");
    golden
}

/// The command a frame's file name says it is (`NN-<label>.bin`).
fn expected_code(name: &str) -> CommandCode {
    use CommandCode as C;
    let label = name
        .split_once('-')
        .map(|(_, rest)| rest.trim_end_matches(".bin"))
        .unwrap_or(name);
    match label {
        "ping" => C::Ping,
        "login" => C::LoginRegister,
        "logout" => C::LogoutUser,
        "get-cluster-metadata" => C::GetClusterMetadata,
        "get-stats" => C::GetStats,
        "create-stream" => C::CreateStream,
        "get-streams" => C::GetStreams,
        "get-stream" => C::GetStream,
        "delete-stream" => C::DeleteStream,
        "create-topic" => C::CreateTopic,
        "get-topic" => C::GetTopic,
        "get-topics" => C::GetTopics,
        "delete-topic" => C::DeleteTopic,
        "send" => C::SendMessages,
        "poll" => C::PollMessages,
        "store-offset" => C::StoreConsumerOffset,
        "get-offset" => C::GetConsumerOffset,
        "delete-offset" => C::DeleteConsumerOffset,
        "create-group" => C::CreateConsumerGroup,
        "join-group" => C::JoinConsumerGroup,
        "get-group" => C::GetConsumerGroup,
        "get-groups" => C::GetConsumerGroups,
        "leave-group" => C::LeaveConsumerGroup,
        "delete-group" => C::DeleteConsumerGroup,
        "sync-group" => C::SyncConsumerGroup,
        "create-user" => C::CreateUser,
        "get-users" => C::GetUsers,
        "get-user" => C::GetUser,
        "update-user" => C::UpdateUser,
        "change-password" => C::ChangePassword,
        "update-permissions" => C::UpdatePermissions,
        "delete-user" => C::DeleteUser,
        "create-pat" => C::CreatePersonalAccessToken,
        "get-pats" => C::GetPersonalAccessTokens,
        "delete-pat" => C::DeletePersonalAccessToken,
        other => panic!("no expected command for golden frame label {other:?}"),
    }
}

// Proves the codec accepts every frame the official SDK sent: each file is
// exactly one complete frame, its checksum stamp verifies, it decodes to
// the command its name says, and the command reports the operation byte it
// travelled with; and that the test kit's encoder, given the decoded
// command, writes the SDK's body byte for byte.
#[test]
fn every_golden_frame_decodes() {
    for golden in load() {
        let (frame, used) = decode_frame(&golden.bytes)
            .unwrap_or_else(|error| panic!("{}: {error}", golden.name))
            .unwrap_or_else(|| panic!("{}: incomplete frame", golden.name));
        assert_eq!(used, golden.bytes.len(), "{}", golden.name);
        let command = frame
            .command()
            .unwrap_or_else(|error| panic!("{}: {error}", golden.name));
        assert_eq!(
            command.code(),
            expected_code(&golden.name),
            "{}",
            golden.name
        );
        assert_eq!(
            command.operation() as u8,
            frame.header.operation,
            "{}",
            golden.name
        );
        // The kit's encoder writes exactly the SDK's bytes.
        let request = request_of(&command);
        assert_eq!(request.operation, frame.header.operation, "{}", golden.name);
        assert_eq!(
            request.body, frame.body,
            "{}: the kit's encoding differs from the SDK's",
            golden.name
        );
        if let Command::SendMessages(send) = command {
            let summary = iggyd_wire::batch::validate(send.batch)
                .unwrap_or_else(|error| panic!("{}: {error}", golden.name));
            assert_eq!(summary.header.message_count, send.messages_count);
        }
    }
}

// Proves a live daemon answers the SDK's exact byte sequence as it did at
// capture time: the captured session (login, streams, topics, send with
// user headers, polls, offsets, groups, users, PATs, logout) is replayed on
// one connection, with only the header's session number rewritten to the
// one this daemon hands out, and every reply has the captured command byte
// and status.
#[test]
fn golden_session_replays_with_the_captured_statuses() {
    let daemon = TestDaemon::start();
    let mut stream = connect(daemon.address);
    let mut session = 0u64;
    for golden in load() {
        let mut bytes = golden.bytes.clone();
        let captured_session = u64::from_le_bytes(bytes[184..192].try_into().unwrap());
        if captured_session != 0 {
            bytes[184..192].copy_from_slice(&session.to_le_bytes());
        }
        let reply = exchange(&mut stream, &bytes)
            .unwrap_or_else(|| daemon.fail(&format!("{}: connection closed", golden.name)));
        assert_eq!(
            (reply.command(), reply.status()),
            (golden.reply_command, golden.reply_status),
            "{}",
            golden.name
        );
        if expected_code(&golden.name) == CommandCode::LoginRegister {
            session = u64::from_le_bytes(reply.body[8..16].try_into().unwrap());
            assert_ne!(session, 0);
        }
    }
    daemon.assert_clean_log();
}
