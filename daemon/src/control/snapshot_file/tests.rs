//! Tests of snapshot files: request parsing as the wire sends it, ZIPs
//! built from a daemon source over published state and opened with the
//! `zip` reader for every compression the writer has, no secret in any
//! entry, and the worker thread answering an async caller and stopping.

use super::*;
use crate::config::Sources;
use crate::control::test_fixture;
use crate::limits;
use crate::net::snapshot_request::queue;
use crate::preflight::Driver;
use iggyd_metadata::{MetadataCommand, UserStatus};
use std::io::Read;
use std::time::UNIX_EPOCH;

const PASSWORD: &str = "hunter22-root";
const PASSWORD_HASH: &str = "$argon2id$v=19$m=8,t=1,p=1$c2VjcmV0LWhhc2g";

pub(super) fn sources(dir: &std::path::Path) -> SnapshotSources {
    let config_file = dir.join("iggyd.toml");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        &config_file,
        format!(
            "data_dir = \"{}\"\n[root]\npassword = \"{PASSWORD}\"\n[logging]\ndir = \"{}\"\n",
            dir.display(),
            logs.display()
        ),
    )
    .unwrap();
    let lines: String = (0..20_000).map(|line| format!("line {line}\n")).collect();
    std::fs::write(logs.join("iggyd.log"), lines).unwrap();
    std::fs::write(logs.join("iggyd.20260101T000000Z.000001.log"), "older\n").unwrap();
    std::fs::write(dir.join("segment.log"), vec![0u8; 1234]).unwrap();
    let config = crate::config::Config::load(&Sources {
        file: Some(config_file),
        ..Sources::default()
    })
    .unwrap();
    let heartbeats = Heartbeats::new(1);
    let reader = MetadataCommand::CreateUser {
        username: "reader".into(),
        password_hash: PASSWORD_HASH.into(),
        status: UserStatus::Active,
        permissions: None,
        created_at_us: 1,
    };
    test_fixture::publish_view(&heartbeats, "orders", 3, [reader]);
    let plan = crate::topology::plan(
        &crate::config::CpuAllocation::Count(1),
        &crate::topology::PlanEnv::default(),
    )
    .unwrap();
    let admin = Arc::new(test_fixture::source(
        plan.shards.clone(),
        Driver::Epoll,
        &heartbeats,
        dir.to_path_buf(),
        logs,
        None,
    ));
    SnapshotSources {
        admin,
        heartbeats,
        config,
        plan,
    }
}

/// `(name, compression method, contents)` of every entry.
pub(super) fn entries(zip: &[u8]) -> Vec<(String, zip::CompressionMethod, String)> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
    (0..archive.len())
        .map(|index| {
            let mut file = archive.by_index(index).unwrap();
            let mut text = String::new();
            file.read_to_string(&mut text).unwrap();
            (file.name().unwrap().to_string(), file.compression(), text)
        })
        .collect()
}

/// Proves the request body parses as the SDK sends it: 100 expands to
/// every type but `test`; unknown codes, no types and LZMA are refused.
#[test]
fn requests_parse_like_the_sdk_sends_them() {
    let all = SnapshotFileRequest::parse(2, &[100]).unwrap();
    assert_eq!(all.compression, Compression::Deflated);
    assert_eq!(all.types.len(), 5);
    assert!(!all.types.contains(&SnapshotType::Test));
    let two = SnapshotFileRequest::parse(1, &[4, 6, 4]).unwrap();
    assert_eq!(
        two.types.into_iter().collect::<Vec<_>>(),
        [SnapshotType::Test, SnapshotType::ServerConfig]
    );
    assert_eq!(
        SnapshotFileRequest::parse(7, &[1]),
        Err(SnapshotFileError::UnknownCompression(7))
    );
    assert_eq!(
        SnapshotFileRequest::parse(1, &[7]),
        Err(SnapshotFileError::UnknownType(7))
    );
    assert_eq!(
        SnapshotFileRequest::parse(1, &[]),
        Err(SnapshotFileError::NoTypes)
    );
    assert_eq!(
        SnapshotFileRequest::parse(5, &[1]),
        Err(SnapshotFileError::LzmaUnavailable)
    );
}

/// Proves a full snapshot opens with every compression the writer has, each
/// entry compressed as asked, with the promised files and contents and no
/// secret anywhere.
#[test]
fn full_snapshot_opens_and_holds_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let sources = sources(dir.path());
    for (code, method) in [
        (1, zip::CompressionMethod::Stored),
        (2, zip::CompressionMethod::Deflated),
        (3, zip::CompressionMethod::Bzip2),
        (4, zip::CompressionMethod::Zstd),
        (6, zip::CompressionMethod::Xz),
    ] {
        let request = SnapshotFileRequest::parse(code, &[100, 4]).unwrap();
        let zip = build(&request, &sources).unwrap();
        let entries = entries(&zip);
        let names: Vec<&str> = entries.iter().map(|(name, _, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "summary.json",
                "filesystem_overview.txt",
                "process_list.txt",
                "resource_usage.json",
                "test.txt",
                "logs/iggyd.log",
                "server_config.toml",
                "plan.json",
                "metadata.json",
            ],
            "compression {code}"
        );
        assert!(
            entries.iter().all(|(_, found, _)| *found == method),
            "{code}"
        );
        let file = |name: &str| {
            entries
                .iter()
                .find(|(found, _, _)| found == name)
                .map(|(_, _, text)| text.clone())
                .unwrap()
        };
        for (name, _, text) in &entries {
            assert!(!text.contains(PASSWORD), "{name} shows the root password");
            assert!(
                !text.contains(PASSWORD_HASH),
                "{name} shows a password hash"
            );
        }
        let summary: serde_json::Value = serde_json::from_str(&file("summary.json")).unwrap();
        assert_eq!(summary["requested"]["types"].as_array().unwrap().len(), 6);
        assert!(
            summary["host"]["kernel"]
                .as_str()
                .is_some_and(|kernel| !kernel.is_empty())
        );
        assert_eq!(file("test.txt"), "test\n");
        let log = file("logs/iggyd.log");
        assert_eq!(log.lines().count(), limits::SNAPSHOT_LOG_LINES_MAX);
        assert!(log.ends_with("line 19999\n"));
        assert!(file("server_config.toml").contains("password = \"<redacted>\""));
        let plan: serde_json::Value = serde_json::from_str(&file("plan.json")).unwrap();
        assert_eq!(plan["shards"].as_array().unwrap().len(), 1);
        let metadata: serde_json::Value = serde_json::from_str(&file("metadata.json")).unwrap();
        assert_eq!(metadata["partitions_count"], 3);
        assert_eq!(
            metadata["streams"][0]["topics"][0]["consumer_groups"][0]["name"],
            "billing"
        );
        assert_eq!(metadata["users"][0]["username"], "reader");
        let usage: serde_json::Value = serde_json::from_str(&file("resource_usage.json")).unwrap();
        assert_eq!(usage["daemon"]["shards"].as_array().unwrap().len(), 1);
        assert_eq!(usage["daemon"]["topics"][0]["topic"], "created");
        assert!(file("filesystem_overview.txt").contains("segment.log"));
        assert!(
            file("process_list.txt")
                .contains(&format!("threads of iggyd (pid {})", std::process::id()))
        );
    }
}

/// Proves the worker answers a caller that awaits on a monoio runtime (as a
/// connection does), answers only what was asked (`test` → summary and
/// test.txt), and that stopping it answers later requests with "stopping".
#[test]
fn worker_answers_async_callers_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let (files, jobs) = queue();
    let worker = SnapshotWorker::start(&files, jobs, sources(dir.path())).unwrap();
    let mut runtime = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .unwrap();
    let request = SnapshotFileRequest::parse(2, &[4]).unwrap();
    let zip = runtime.block_on(files.build(request.clone())).unwrap();
    let names: Vec<String> = entries(&zip).into_iter().map(|(name, _, _)| name).collect();
    assert_eq!(names, ["summary.json", "test.txt"]);
    worker.stop();
    assert_eq!(
        runtime.block_on(files.build(request)),
        Err(SnapshotFileError::Stopping)
    );
}

#[test]
fn zip_times_are_utc_calendar_dates() {
    let time = UNIX_EPOCH + std::time::Duration::from_secs(1_709_210_096);
    let stamp = zip_time(time).unwrap();
    assert_eq!(
        (
            stamp.year(),
            stamp.month(),
            stamp.day(),
            stamp.hour(),
            stamp.minute(),
            stamp.second()
        ),
        (2024, 2, 29, 12, 34, 56)
    );
    assert!(zip_time(UNIX_EPOCH).is_none());
}
