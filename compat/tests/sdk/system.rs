//! System commands: ping, stats, me, clients and cluster metadata.

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
