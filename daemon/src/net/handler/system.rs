//! System requests: stats, cluster metadata, option descriptions, the
//! client registry (GetMe, GetClient, GetClients) and snapshot files. The
//! registry is spread over the shards (each knows its own connections), so
//! client listings ask every shard over the mesh; a snapshot file is built
//! on the control plane's `snapshot` thread while this task awaits it.

use super::{Handled, HandlerError, Outcome, Request_, partition_op};
use crate::net::context::NetContext;
use crate::shard::front;
use crate::shard::mesh::{Request, Response};
use crate::shard::op::PartitionOp;
use iggyd_metadata::TopicOptions;
use iggyd_metadata::options::OptionKey;
use iggyd_metadata::permissions::Principal;
use iggyd_wire::protocol::codes::Status;
use iggyd_wire::protocol::command::OptionScope;
use iggyd_wire::protocol::reply::{
    ClientGroup, ClientInfo, ClusterNode, NodeRole, OptionDescription, Stats, Transport,
    encode_client, encode_client_details, encode_cluster_metadata, encode_cluster_node,
    encode_option_descriptions, encode_stats,
};

/// Every connection of every shard.
pub(crate) async fn all_clients(context: &NetContext) -> Handled<Vec<front::ClientInfo>> {
    let mut clients = Vec::new();
    for shard in 0..context.shards {
        if shard == context.shard {
            clients.extend(context.clients());
            continue;
        }
        match context
            .mesh
            .request(context.shard, shard, Request::Clients)
            .await
        {
            Ok(Response::Clients(found)) => clients.extend(found),
            _ => return Err(HandlerError::Status(Status::Error)),
        }
    }
    clients.sort_by_key(|client| client.client_id);
    Ok(clients)
}

fn encode_details(out: &mut Vec<u8>, client: &front::ClientInfo) {
    let address = client.peer.to_string();
    let groups: Vec<ClientGroup> = client
        .memberships
        .iter()
        .map(|membership| ClientGroup {
            stream_id: membership.stream,
            topic_id: membership.topic,
            group_id: membership.group,
        })
        .collect();
    let info = ClientInfo {
        client_id: client.client_id,
        user_id: client.user_id,
        transport: Transport::Tcp,
        address: &address,
        consumer_groups_count: groups.len() as u32,
    };
    encode_client_details(out, &info, &groups);
}

/// GetSnapshotFile: a ZIP of diagnostics (`control::snapshot_file`).
/// Needs read_servers. A malformed compression or type is "invalid
/// command"; LZMA, which the ZIP writer cannot produce, "feature
/// unavailable".
pub(crate) async fn snapshot_file(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    compression: u8,
    types: &[u8],
) -> Handled<Outcome> {
    use crate::net::snapshot_request::{SnapshotFileError, SnapshotFileRequest};
    principal.read_server()?;
    let status = |error: &SnapshotFileError| match error {
        SnapshotFileError::UnknownCompression(_)
        | SnapshotFileError::UnknownType(_)
        | SnapshotFileError::NoTypes => Status::InvalidCommand,
        SnapshotFileError::LzmaUnavailable => Status::FeatureUnavailable,
        SnapshotFileError::Stopping | SnapshotFileError::Zip(_) => Status::Error,
    };
    let parsed = match SnapshotFileRequest::parse(compression, types) {
        Ok(parsed) => parsed,
        Err(error) => {
            tracing::info!(%error, "snapshot file refused");
            return Err(HandlerError::Status(status(&error)));
        }
    };
    match request.context.snapshot_files.build(parsed).await {
        Ok(zip) => Ok(request.replier.ok(&zip)),
        Err(error) => Err(HandlerError::Status(status(&error))),
    }
}

pub(crate) async fn me(request: &mut Request_<'_>) -> Handled<Outcome> {
    let me = front::ClientInfo {
        client_id: request.session.client_id,
        peer: request.session.peer,
        user_id: request.session.user_id(),
        memberships: request.session.memberships.iter().copied().collect(),
    };
    let mut out = Vec::new();
    encode_details(&mut out, &me);
    Ok(request.replier.ok(&out))
}

pub(crate) async fn client(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    client_id: u32,
) -> Handled<Outcome> {
    principal.read_server()?;
    let clients = all_clients(request.context).await?;
    let mut out = Vec::new();
    if let Some(client) = clients.iter().find(|client| client.client_id == client_id) {
        encode_details(&mut out, client);
    }
    Ok(request.replier.ok(&out))
}

pub(crate) async fn clients(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
) -> Handled<Outcome> {
    principal.read_server()?;
    let clients = all_clients(request.context).await?;
    let mut out = Vec::new();
    for client in &clients {
        let address = client.peer.to_string();
        encode_client(
            &mut out,
            &ClientInfo {
                client_id: client.client_id,
                user_id: client.user_id,
                transport: Transport::Tcp,
                address: &address,
                consumer_groups_count: client.memberships.len() as u32,
            },
        );
    }
    Ok(request.replier.ok(&out))
}

/// The cluster as clients see it. One node: this daemon, at the address
/// clients reach it on (the SDK keeps it as its failover target). A cluster
/// node: every node at its configured client address, the metadata group's
/// leader as the one Leader (none during an election: the SDK then waits
/// and asks again), every node Healthy (the SDK moves only to a Leader +
/// Healthy node; a node it cannot reach it skips when it fails over).
pub(crate) fn cluster_metadata(request: &mut Request_<'_>) -> Handled<Outcome> {
    let mut out = Vec::new();
    match &request.context.net.cluster {
        None => {
            let ip = request.context.address.ip().to_string();
            let roster = [ClusterNode::tcp_leader(
                "iggyd",
                &ip,
                request.context.address.port(),
            )];
            encode_cluster_metadata(&mut out, "single-node", &roster);
        }
        Some(cluster) => {
            let leader = cluster.leader_to_show();
            let nodes = cluster.nodes();
            let ips: Vec<String> = nodes
                .iter()
                .map(|node| node.address.ip().to_string())
                .collect();
            let roster: Vec<ClusterNode<'_>> = nodes
                .iter()
                .zip(&ips)
                .map(|(node, ip)| ClusterNode {
                    role: if leader == Some(node.id) {
                        NodeRole::Leader
                    } else {
                        NodeRole::Follower
                    },
                    ..ClusterNode::tcp_leader(&node.name, ip, node.address.port())
                })
                .collect();
            encode_cluster_metadata(&mut out, &cluster.name, &roster);
        }
    }
    Ok(request.replier.ok(&out))
}

/// Codes 103 and 123 (§6.11): which node serves a partition's auto-commit
/// polls and offset writes, for a client that sees more than one node. The
/// answer is the asking session's own client id and number (the data
/// connection attaches to them with code 14), the metadata watermark, and
/// this node (the leader the client is on: it serves every partition,
/// forwarding writes to each partition's own leader). One node is never
/// asked: status 3 there.
pub(crate) fn partition_routing(request: &mut Request_<'_>) -> Handled<Outcome> {
    let Some(cluster) = &request.context.net.cluster else {
        return Ok(request.replier.status(Status::InvalidCommand));
    };
    let nodes = cluster.nodes();
    let Some(here) = nodes.iter().find(|node| node.id == cluster.node_id) else {
        return Ok(request.replier.status(Status::FeatureUnavailable));
    };
    let client = request.session.login.map_or(0, |login| login.client);
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(&client.to_le_bytes());
    out.extend_from_slice(&request.session.number().to_le_bytes());
    out.extend_from_slice(&request.session.commit.to_le_bytes());
    let ip = here.address.ip().to_string();
    let node = ClusterNode::tcp_leader(&here.name, &ip, here.address.port());
    encode_cluster_node(&mut out, &node);
    Ok(request.replier.ok(&out))
}

/// Code 14 (§6.11): a routed data connection acts, in consumer groups, for
/// the live session `parent` of the same user; anything else is a stale
/// client to the SDK (it asks for the route again).
pub(crate) fn attach(request: &mut Request_<'_>, parent: u64) -> Handled<Outcome> {
    if request.context.net.cluster.is_none() {
        return Ok(request.replier.status(Status::InvalidCommand));
    }
    let user = request.session.user_id();
    if user.is_none() || request.context.net.session_user(parent) != user {
        return Ok(request.replier.status(Status::StaleClient));
    }
    request.session.acting_for = Some(parent);
    Ok(request.replier.empty())
}

/// What each topic option means, for DescribeOptions.
fn option_description(key: OptionKey) -> &'static str {
    match key {
        OptionKey::CompressionAlgorithm => {
            "compression recorded for the topic: none or gzip (metadata only)"
        }
        OptionKey::MessageExpiry => {
            "age after which sealed segments are deleted, in µs or humantime; none = never"
        }
        OptionKey::MaxTopicSize => {
            "size above which the oldest sealed segments are deleted; unlimited = never"
        }
        OptionKey::SegmentSize => {
            "size at which a partition's active segment is sealed (512-byte multiple, 1 MiB..1 GiB)"
        }
        OptionKey::Durability => {
            "persisted: acknowledge after fsync (group commit); replicated: after the write"
        }
        OptionKey::ConsumerOffsetDurability => "the same choice for stored consumer offsets",
        OptionKey::MessagesRequiredToSave => {
            "replicated topics: fsync after this many unsynced messages"
        }
        OptionKey::SizeOfMessagesRequiredToSave => {
            "replicated topics: fsync after this many unsynced bytes"
        }
        OptionKey::PreallocateSegments => "accepted for compatibility; segments grow as written",
    }
}

pub(crate) fn describe_options(request: &mut Request_<'_>, scope: OptionScope) -> Handled<Outcome> {
    let mut out = Vec::new();
    match scope {
        OptionScope::Topic => {
            let defaults = TopicOptions::defaults(request.context.default_durability);
            let canonical: Vec<_> = OptionKey::ALL
                .iter()
                .map(|key| (*key, defaults.canonical(*key)))
                .collect();
            let entries: Vec<OptionDescription<'_>> = canonical
                .iter()
                .map(|(key, option)| OptionDescription {
                    key: option.key,
                    kind: option.kind,
                    default: &option.value,
                    description: option_description(*key),
                })
                .collect();
            encode_option_descriptions(&mut out, &entries);
        }
        // Streams and users define no option keys.
        OptionScope::Stream | OptionScope::User => encode_option_descriptions(&mut out, &[]),
    }
    Ok(request.replier.ok(&out))
}

/// CPU time of this process in clock ticks (utime + stime), from
/// /proc/self/stat.
fn process_cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn meminfo(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let rest = line.strip_prefix(key)?.strip_prefix(':')?;
                rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
            })
        })
        .map_or(0, |kib| kib * 1024)
}

fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|text| {
            text.split_whitespace()
                .nth(1)
                .and_then(|pages| pages.parse::<u64>().ok())
        })
        .unwrap_or(0);
    pages * 4096
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|text| text.trim().to_string())
        .unwrap_or_default()
}

fn disk_space(path: &std::path::Path) -> (u64, u64) {
    match nix::sys::statvfs::statvfs(path) {
        Ok(stat) => {
            let fragment = stat.fragment_size();
            (stat.blocks_available() * fragment, stat.blocks() * fragment)
        }
        Err(_) => (0, 0),
    }
}

pub(crate) async fn stats(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
) -> Handled<Outcome> {
    principal.read_server()?;
    let context = request.context;
    let mut messages = 0u64;
    let mut bytes = 0u64;
    let mut segments = 0u64;
    for shard in 0..context.shards {
        let reports = partition_op(context, shard, |reply| PartitionOp::Report { reply }).await?;
        for report in reports {
            messages += report.stats.messages;
            bytes += report.stats.bytes;
            segments += report.stats.segments as u64;
        }
    }
    let clients = super::system::all_clients(context).await?;
    let view = &request.view;
    let run_time = context.started.elapsed();
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100, |ticks| ticks.max(1) as u64);
    let cpu_seconds = process_cpu_ticks().unwrap_or(0) as f64 / ticks_per_second as f64;
    let cpu_usage = if run_time.as_secs_f64() > 0.0 {
        (cpu_seconds / run_time.as_secs_f64() * 100.0) as f32
    } else {
        0.0
    };
    let loadavg = read_trimmed("/proc/loadavg");
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f32;
    let total_cpu_usage = loadavg
        .split_whitespace()
        .next()
        .and_then(|load| load.parse::<f32>().ok())
        .map_or(0.0, |load| (load / cores * 100.0).min(100.0));
    let hostname = read_trimmed("/proc/sys/kernel/hostname");
    let os_name = read_trimmed("/proc/sys/kernel/ostype");
    let os_version = read_trimmed("/proc/sys/kernel/version");
    let kernel_version = read_trimmed("/proc/sys/kernel/osrelease");
    let data_dir = std::path::Path::new(".");
    let (free_disk, total_disk) = disk_space(data_dir);
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |tasks| tasks.count() as u32);
    let version = env!("CARGO_PKG_VERSION");
    let stats = Stats {
        process_id: std::process::id(),
        cpu_usage,
        total_cpu_usage,
        memory_usage_bytes: rss_bytes(),
        total_memory_bytes: meminfo("MemTotal"),
        available_memory_bytes: meminfo("MemAvailable"),
        run_time_us: run_time.as_micros() as u64,
        start_time_us: context.started_at_us,
        read_bytes: 0,
        written_bytes: bytes,
        messages_size_bytes: bytes,
        streams_count: view.streams_count() as u32,
        topics_count: view.topics_count() as u32,
        partitions_count: view.partitions_count() as u32,
        segments_count: segments as u32,
        messages_count: messages,
        clients_count: clients.len() as u32,
        consumer_groups_count: view.consumer_groups_count() as u32,
        hostname: &hostname,
        os_name: &os_name,
        os_version: &os_version,
        kernel_version: &kernel_version,
        server_version: version,
        server_semver: semver(version),
        cache_metrics: &[],
        threads_count: threads,
        free_disk_space_bytes: free_disk,
        total_disk_space_bytes: total_disk,
    };
    let mut out = Vec::new();
    encode_stats(&mut out, &stats);
    Ok(request.replier.ok(&out))
}

/// major·10⁶ + minor·10³ + patch.
fn semver(version: &str) -> u32 {
    let mut parts = version
        .split('.')
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    let patch = parts.next().unwrap_or(0);
    major * 1_000_000 + minor * 1_000 + patch
}
