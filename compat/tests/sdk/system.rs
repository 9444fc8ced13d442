//! System commands: ping, stats, me, clients, cluster metadata and
//! snapshot files.

use crate::common::*;
use iggy::prelude::*;

/// Proves the SDK's own login path (connection string with credentials, which
/// runs its leader check through GetClusterMetadata on connect) works, and
/// that ping, stats, me, clients and cluster metadata decode with the values
/// the daemon actually has (one node, our port, our connections, our counts).
#[tokio::test]
async fn ping_stats_me_clients_and_cluster_metadata() {
    let daemon = SdkDaemon::start();
    let client = daemon
        .connection_string_client(ROOT_USERNAME, ROOT_PASSWORD)
        .await;
    client.ping().await.expect("ping");

    let metadata = client.get_cluster_metadata().await.expect("cluster");
    assert_eq!(metadata.nodes.len(), 1, "{metadata:?}");
    let node = &metadata.nodes[0];
    assert_eq!(node.role, ClusterNodeRole::Leader);
    assert_eq!(node.status, ClusterNodeStatus::Healthy);
    assert_eq!(node.endpoints.tcp, daemon.address.port(), "{node:?}");

    let me = client.get_me().await.expect("me");
    assert_eq!(me.user_id, Some(0), "root is user 0: {me:?}");
    assert_eq!(me.transport, "TCP");

    let second = daemon.root_client().await;
    stream_with_topic(&second, "stats", "t", 3).await;
    send_to(&second, "stats", "t", 1, messages("m", 0, 5)).await;

    let clients = client.get_clients().await.expect("clients");
    assert!(clients.len() >= 2, "{clients:?}");
    assert!(
        clients.iter().any(|info| info.client_id == me.client_id),
        "the caller is listed: {clients:?}"
    );
    let other = client
        .get_client(
            clients
                .iter()
                .find(|c| c.client_id != me.client_id)
                .unwrap()
                .client_id,
        )
        .await
        .expect("get client");
    assert!(other.is_some());

    let stats = client.get_stats().await.expect("stats");
    assert_eq!(stats.streams_count, 1, "{stats:?}");
    assert_eq!(stats.topics_count, 1);
    assert_eq!(stats.partitions_count, 3);
    assert_eq!(stats.messages_count, 5);
    assert!(stats.clients_count >= 2);
    assert_eq!(stats.process_id as i32, daemon.pid());

    let options = client
        .describe_options(OptionsScope::Topic)
        .await
        .expect("describe topic options");
    assert!(
        options.iter().any(|option| option.key == "max_topic_size"),
        "{options:?}"
    );

    client.logout_user().await.expect("logout");
    assert_code(client.get_me().await, 40, "get_me after logout");
    daemon.assert_clean_log();
}

/// Proves GetSnapshotFile through the SDK: the answer is a ZIP that opens,
/// in the asked compression, with the files of the asked types; LZMA, which
/// the daemon's ZIP writer cannot produce, is "feature unavailable" (5).
#[tokio::test]
async fn snapshot_file_is_a_zip_of_the_asked_types() {
    use std::io::Read;
    let daemon = SdkDaemon::start();
    let client = daemon.root_client().await;
    stream_with_topic(&client, "snap", "t", 2).await;
    let snapshot = client
        .snapshot(
            SnapshotCompression::Bzip2,
            vec![SystemSnapshotType::ServerConfig, SystemSnapshotType::Test],
        )
        .await
        .expect("snapshot");
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(snapshot.0)).expect("a ZIP archive");
    let mut names = Vec::new();
    for index in 0..archive.len() {
        let mut file = archive.by_index(index).expect("entry");
        assert_eq!(file.compression(), zip::CompressionMethod::Bzip2);
        let mut text = String::new();
        file.read_to_string(&mut text).expect("utf-8 entry");
        let name = file.name().expect("entry name").to_string();
        if name == "metadata.json" {
            assert!(text.contains("\"snap\""), "{text}");
        }
        if name == "server_config.toml" {
            assert!(text.contains("password = \"<redacted>\""), "{text}");
        }
        names.push(name);
    }
    assert_eq!(
        names,
        [
            "summary.json",
            "test.txt",
            "server_config.toml",
            "plan.json",
            "metadata.json"
        ]
    );
    assert_code(
        client
            .snapshot(SnapshotCompression::Lzma, vec![SystemSnapshotType::All])
            .await,
        5,
        "lzma snapshot",
    );
    daemon.assert_clean_log();
}
