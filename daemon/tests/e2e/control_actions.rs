//! The console's actions and names against the real daemon, over its admin
//! socket: `disconnect_client` closes exactly the client it names (and
//! says when there is none), `snapshot_file` writes a ZIP the `zip` crate
//! opens to a new file and refuses what it must, and a consumer group's
//! members carry the client id of the connection that joined.

use crate::control::{admin_socket, ask};
use crate::messages::{logged_in, send, stream_with_topic};
use iggyd_testkit::TestDaemon;
use iggyd_testkit::wire::{Client, Identifier, Request};
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

/// Snapshots until `found` returns something (the shards report their
/// clients once a second), for at most 10 s.
fn wait_for<T>(path: &Path, what: &str, found: impl Fn(&serde_json::Value) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = ask(path, &[r#"{"v":1,"op":"snapshot"}"#]);
        let snapshot = &answer[0]["snapshot"];
        if let Some(value) = found(snapshot) {
            return value;
        }
        assert!(Instant::now() < deadline, "never saw {what}: {snapshot}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `client_id` the snapshot lists for the connection whose local
/// address is `client`'s.
fn client_id_of(path: &Path, client: &mut Client) -> u64 {
    let address = client
        .socket_mut()
        .local_addr()
        .expect("a connected client")
        .to_string();
    wait_for(path, &format!("client {address}"), |snapshot| {
        snapshot["clients"].as_array()?.iter().find_map(|entry| {
            (entry["address"] == address.as_str()).then(|| entry["client_id"].as_u64())?
        })
    })
}

/// Proves `disconnect_client` against the real daemon: the named
/// connection is closed (its next request fails and the snapshot stops
/// listing it) while another client on the same daemon keeps working; the
/// reply says the client was found; an id nobody has is answered with an
/// error that says so.
#[test]
fn disconnect_client_closes_the_named_connection() {
    let daemon = TestDaemon::start();
    let path = admin_socket(&daemon);
    let mut victim = logged_in(daemon.address, "iggy", "iggy");
    let mut bystander = logged_in(daemon.address, "iggy", "iggy");
    let victim_id = client_id_of(&path, &mut victim);
    let bystander_id = client_id_of(&path, &mut bystander);
    assert_ne!(victim_id, bystander_id);

    let request = format!(r#"{{"v":1,"op":"disconnect_client","client_id":{victim_id}}}"#);
    let answer = &ask(&path, &[&request])[0];
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(answer["type"], "done");
    let message = answer["message"].as_str().expect("a message");
    assert!(
        message.starts_with(&format!("client {victim_id} on shard "))
            && message.ends_with("is being closed"),
        "{message}"
    );
    assert!(victim.ping().is_err(), "the named connection is closed");
    bystander.ping().expect("the other client is still served");
    wait_for(&path, "the victim gone from the list", |snapshot| {
        let ids: Vec<u64> = snapshot["clients"]
            .as_array()?
            .iter()
            .filter_map(|entry| entry["client_id"].as_u64())
            .collect();
        (ids.contains(&bystander_id) && !ids.contains(&victim_id)).then_some(())
    });

    let unknown = 4_000_000_000u64;
    let request = format!(r#"{{"v":1,"op":"disconnect_client","client_id":{unknown}}}"#);
    let answer = &ask(&path, &[&request])[0];
    assert_eq!(
        answer,
        &serde_json::json!({"v":1,"ok":false,"error":format!("no client {unknown} is connected")})
    );
    bystander.ping().expect("still served");
}

/// The names of a ZIP's entries and the text of one of them.
fn zip_entries(bytes: &[u8], read: &str) -> (Vec<String>, String) {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("a ZIP");
    let names = archive
        .file_names()
        .map(|name| name.expect("a UTF-8 entry name").into_owned())
        .collect();
    let mut text = String::new();
    archive
        .by_name(read)
        .expect("the entry")
        .read_to_string(&mut text)
        .unwrap();
    (names, text)
}

/// Proves `snapshot_file` against the real daemon: a new absolute path
/// receives a ZIP of every type (deflated by default) whose size the reply
/// states and whose metadata lists the daemon's streams, with no temporary
/// file left; writing to the same path again, a relative path, a missing
/// directory and the data directory are refused with a message naming the
/// problem, and nothing is written.
#[test]
fn snapshot_file_writes_a_zip_to_a_new_path() {
    let daemon = TestDaemon::start();
    let path = admin_socket(&daemon);
    let mut client = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut client, "snapshots", "events", 1);
    let out = tempfile::tempdir().unwrap();
    let zip_path = out.path().join("iggyd-snapshot.zip");
    let request = iggyd_admin_api::snapshot_file_request(
        zip_path.to_str().unwrap(),
        iggyd_admin_api::SNAPSHOT_FILE_COMPRESSION_DEFAULT,
        &["all"],
    );
    let answer = &ask(&path, &[request.trim_end()])[0];
    assert_eq!(answer["ok"], true, "{answer}");
    let bytes = std::fs::read(&zip_path).expect("the ZIP was written");
    assert_eq!(
        answer["message"],
        format!(
            "wrote a snapshot ZIP of {} bytes to {}",
            bytes.len(),
            std::fs::canonicalize(&zip_path).unwrap().display()
        )
    );
    let (names, metadata) = zip_entries(&bytes, "metadata.json");
    for expected in [
        "summary.json",
        "filesystem_overview.txt",
        "process_list.txt",
        "resource_usage.json",
        "server_config.toml",
        "plan.json",
        "metadata.json",
    ] {
        assert!(
            names.iter().any(|name| name == expected),
            "{expected}: {names:?}"
        );
    }
    assert!(
        !names.iter().any(|name| name == "test.txt"),
        "all is all but test"
    );
    assert!(metadata.contains("\"snapshots\""), "{metadata}");
    let listing: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(listing, ["iggyd-snapshot.zip"]);

    let data_dir_zip = daemon.data_dir().join("snap.zip");
    let refusals = [
        (zip_path.to_str().unwrap().to_string(), "already exists"),
        ("snap.zip".to_string(), "\"snap.zip\" is relative"),
        (
            out.path()
                .join("missing/snap.zip")
                .to_str()
                .unwrap()
                .to_string(),
            "does not exist",
        ),
        (
            data_dir_zip.to_str().unwrap().to_string(),
            "inside the data directory",
        ),
    ];
    for (target, needle) in refusals {
        let request = iggyd_admin_api::snapshot_file_request(&target, "zstd", &["test"]);
        let answer = &ask(&path, &[request.trim_end()])[0];
        assert_eq!(answer["ok"], false, "{target}: {answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.contains(needle),
            "{target}: {error:?} lacks {needle:?}"
        );
    }
    assert_eq!(std::fs::read(&zip_path).unwrap(), bytes, "never replaced");
    assert!(!data_dir_zip.exists());
}

/// Proves a consumer group's member carries the `client_id` of the
/// connection that joined it (the Groups view names members by it), and
/// a member whose connection left is gone from the list.
#[test]
fn group_members_name_their_connection() {
    let daemon = TestDaemon::start();
    let path = admin_socket(&daemon);
    let mut member = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut member, "s", "t", 2);
    send(&mut member, "s", "t", 0, &[b"a"]);
    member
        .call(&Request::create_consumer_group(
            Identifier::Name("s"),
            Identifier::Name("t"),
            "g",
        ))
        .unwrap();
    member
        .call(&Request::join_consumer_group(
            Identifier::Name("s"),
            Identifier::Name("t"),
            Identifier::Name("g"),
        ))
        .unwrap();
    let client_id = client_id_of(&path, &mut member);
    let members = wait_for(&path, "the member's client id", |snapshot| {
        let group = &snapshot["topics"][0]["consumer_groups"][0];
        let members = group["member_list"].as_array()?.clone();
        members
            .iter()
            .all(|entry| entry["client_id"].is_u64())
            .then_some(members)
    });
    assert_eq!(members.len(), 1, "{members:?}");
    assert_eq!(members[0]["client_id"], client_id, "{members:?}");
    assert_eq!(members[0]["partitions"], serde_json::json!([0, 1]));
    drop(member);
    wait_for(&path, "the group without members", |snapshot| {
        let group = &snapshot["topics"][0]["consumer_groups"][0];
        group["member_list"].as_array()?.is_empty().then_some(())
    });
}
