//! Streams, topics, partitions and segments: reads from the view (with sizes
//! and counts from the owner shards), changes through shard 0, and the
//! partition data work that makes a change complete before it is
//! acknowledged — new partitions are open on their owners, deleted ones are
//! closed and their directories moved to the trash (the delete itself is
//! durable once shard 0 journaled it: their storage ids are never listed or
//! given out again), and a purge is durable everywhere before the reply.

use super::{
    Handled, HandlerError, Outcome, Request_, named_topic, partition_op, prepare_and_apply,
};
use crate::limits;
use crate::net::context::{NetContext, PartitionReports, ReportsCache};
use crate::net::session::Session;
use crate::shard::op::PartitionOp;
use crate::shard::partition::PartitionSettings;
use crate::shard::router;
use iggyd_metadata::options::as_entries;
use iggyd_metadata::permissions::Principal;
use iggyd_metadata::{Applied, Ident, MetadataView, PartitionRef, Stream, Topic};
use iggyd_wire::protocol::codes::Status;
use iggyd_wire::protocol::command::{Command, NotSend};
use iggyd_wire::protocol::options::OptionEntry;
use iggyd_wire::protocol::primitives::Identifier;
use iggyd_wire::protocol::reply::{
    PartitionInfo, StreamInfo, TopicInfo, encode_stream, encode_stream_details,
    encode_topic_details, encode_topics,
};
use std::rc::Rc;
use std::time::Instant;

/// Every partition's numbers, from every shard. Asking every pump costs
/// each shard an op per request, which clients looping GetStreams would
/// turn into a stall for everyone: what this shard gathered is reused for
/// [`limits::PARTITION_REPORTS_REUSE`], except by a session that had a
/// request answered since it was gathered (so a client that sends and then
/// asks sees its own messages; others' changes show at most that much
/// later, as they would with any request in flight).
pub(crate) async fn partition_reports(
    context: &NetContext,
    session: &Session,
) -> Handled<Rc<PartitionReports>> {
    let now = Instant::now();
    if let Some(cache) = context.reports_cache.borrow().as_ref()
        && session.settled_at.is_none_or(|settled| settled <= cache.at)
        && now.saturating_duration_since(cache.at) < limits::PARTITION_REPORTS_REUSE
    {
        return Ok(cache.reports.clone());
    }
    let mut reports = PartitionReports::default();
    for shard in 0..context.shards {
        for report in partition_op(context, shard, |reply| PartitionOp::Report { reply }).await? {
            reports.partitions.insert(report.key, report);
        }
    }
    let reports = Rc::new(reports);
    *context.reports_cache.borrow_mut() = Some(ReportsCache {
        at: now,
        reports: reports.clone(),
    });
    Ok(reports)
}

/// `(size_bytes, messages)` of a topic, summed once per set of reports.
fn topic_totals(stream: &Stream, topic: &Topic, reports: &PartitionReports) -> (u64, u64) {
    let key = (stream.id, topic.id, topic.created_at_us);
    if let Some(totals) = reports.topic_totals.borrow().get(&key) {
        return *totals;
    }
    let mut totals = (0, 0);
    for partition in &topic.partitions {
        if let Some(report) = reports
            .partitions
            .get(&router::key(stream, topic, partition))
        {
            totals.0 += report.stats.bytes;
            totals.1 += report.stats.messages;
        }
    }
    reports.topic_totals.borrow_mut().insert(key, totals);
    totals
}

fn stream_info<'a>(stream: &'a Stream, reports: &PartitionReports) -> StreamInfo<'a> {
    let (size_bytes, messages_count) = stream
        .topics
        .values()
        .map(|topic| topic_totals(stream, topic, reports))
        .fold((0, 0), |sum, topic| (sum.0 + topic.0, sum.1 + topic.1));
    StreamInfo {
        id: stream.id,
        created_at_us: stream.created_at_us,
        topics_count: stream.topics.len() as u32,
        size_bytes,
        messages_count,
        name: &stream.name,
        options: &[],
    }
}

/// A topic's header fields, borrowing its option blocks.
fn topic_info<'a>(
    stream: &Stream,
    topic: &'a Topic,
    reports: &PartitionReports,
    explicit: &'a [OptionEntry<'a>],
    derived: &'a [OptionEntry<'a>],
) -> TopicInfo<'a> {
    let (size_bytes, messages_count) = topic_totals(stream, topic, reports);
    TopicInfo {
        id: topic.id,
        created_at_us: topic.created_at_us,
        partitions_count: topic.partitions_count(),
        message_expiry: topic.options.message_expiry_wire(),
        compression: topic.options.compression.to_wire(),
        max_topic_size: topic.options.max_topic_size_wire(),
        size_bytes,
        messages_count,
        name: &topic.name,
        explicit_options: explicit,
        derived_options: derived,
    }
}

/// Encode a topic header (with its two option blocks) via `f`.
fn with_topic_info<R>(
    stream: &Stream,
    topic: &Topic,
    reports: &PartitionReports,
    f: impl FnOnce(&TopicInfo<'_>) -> R,
) -> R {
    let (explicit, derived) = topic.options.option_blocks();
    let explicit = as_entries(&explicit);
    let derived = as_entries(&derived);
    f(&topic_info(stream, topic, reports, &explicit, &derived))
}

/// Every topic of a stream as headers (the option blocks they borrow live
/// for the call of `f`).
fn with_stream_topics<R>(
    stream: &Stream,
    reports: &PartitionReports,
    f: impl FnOnce(&[TopicInfo<'_>]) -> R,
) -> R {
    let blocks: Vec<_> = stream
        .topics
        .values()
        .map(|topic| topic.options.option_blocks())
        .collect();
    let entries: Vec<_> = blocks
        .iter()
        .map(|(explicit, derived)| (as_entries(explicit), as_entries(derived)))
        .collect();
    let topics: Vec<TopicInfo<'_>> = stream
        .topics
        .values()
        .zip(&entries)
        .map(|(topic, (explicit, derived))| topic_info(stream, topic, reports, explicit, derived))
        .collect();
    f(&topics)
}

fn encode_topic_with_partitions(
    out: &mut Vec<u8>,
    stream: &Stream,
    topic: &Topic,
    reports: &PartitionReports,
) {
    let partitions: Vec<PartitionInfo> = topic
        .partitions
        .iter()
        .map(|partition| {
            let report = reports
                .partitions
                .get(&router::key(stream, topic, partition));
            PartitionInfo {
                id: partition.id,
                created_at_us: partition.created_at_us,
                segments_count: report.map_or(1, |report| report.stats.segments.max(1) as u32),
                current_offset: report.map_or(0, |report| report.current_offset),
                size_bytes: report.map_or(0, |report| report.stats.bytes),
                messages_count: report.map_or(0, |report| report.stats.messages),
            }
        })
        .collect();
    with_topic_info(stream, topic, reports, |info| {
        encode_topic_details(out, info, &partitions)
    });
}

fn encode_stream_with_topics(out: &mut Vec<u8>, stream: &Stream, reports: &PartitionReports) {
    with_stream_topics(stream, reports, |topics| {
        encode_stream_details(out, &stream_info(stream, reports), topics);
    });
}

pub(crate) async fn get_stream(
    request: &Request_<'_>,
    principal: &Principal<'_>,
    stream: Identifier<'_>,
) -> Handled<Outcome> {
    let Ok(stream) = request.view.stream(&Ident::from(&stream)) else {
        return Ok(request.replier.empty());
    };
    principal.get_stream(stream.id)?;
    let reports = partition_reports(request.context, request.session).await?;
    let mut out = Vec::new();
    encode_stream_with_topics(&mut out, stream, &reports);
    Ok(request.replier.ok(&out))
}

pub(crate) async fn get_streams(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
) -> Handled<Outcome> {
    principal.get_streams()?;
    let reports = partition_reports(request.context, request.session).await?;
    let mut out = Vec::new();
    for stream in request.view.streams() {
        encode_stream(&mut out, &stream_info(stream, &reports));
    }
    Ok(request.replier.ok(&out))
}

pub(crate) async fn get_topic(
    request: &Request_<'_>,
    principal: &Principal<'_>,
    stream: Identifier<'_>,
    topic: Identifier<'_>,
) -> Handled<Outcome> {
    let Ok((stream, topic)) = named_topic(&request.view, &stream, &topic) else {
        return Ok(request.replier.empty());
    };
    principal.get_topic(stream.id, topic.id)?;
    let reports = partition_reports(request.context, request.session).await?;
    let mut out = Vec::new();
    encode_topic_with_partitions(&mut out, stream, topic, &reports);
    Ok(request.replier.ok(&out))
}

pub(crate) async fn get_topics(
    request: &Request_<'_>,
    principal: &Principal<'_>,
    stream: Identifier<'_>,
) -> Handled<Outcome> {
    let mut out = Vec::new();
    let Ok(stream) = request.view.stream(&Ident::from(&stream)) else {
        // The only list with a count prefix: a missing stream is count 0.
        encode_topics(&mut out, &[]);
        return Ok(request.replier.ok(&out));
    };
    principal.get_topics(stream.id)?;
    let reports = partition_reports(request.context, request.session).await?;
    with_stream_topics(stream, &reports, |topics| encode_topics(&mut out, topics));
    Ok(request.replier.ok(&out))
}

/// Open newly created partitions on their owners (so they exist on disk
/// before the client hears of them).
async fn open_partitions(
    context: &NetContext,
    view: &MetadataView,
    created: &[PartitionRef],
) -> Handled<()> {
    for partition in created {
        let Some(stream) = view.stream_by_id(partition.stream_id) else {
            continue;
        };
        let Some(topic) = stream.topic_by_id(partition.topic_id) else {
            continue;
        };
        let settings = PartitionSettings::from_topic(topic);
        open_on_owner(
            context,
            router::ref_route(partition, context.shards),
            settings,
        )
        .await?;
    }
    Ok(())
}

/// Open one partition on its owner with `settings`, or hand an open one
/// its new settings.
async fn open_on_owner(
    context: &NetContext,
    router::Route { key, owner }: router::Route,
    settings: PartitionSettings,
) -> Handled<()> {
    partition_op(context, owner, |reply| PartitionOp::Open {
        key,
        settings,
        reply,
    })
    .await?;
    Ok(())
}

/// Close removed partitions on their owners and move their data to the
/// trash (removed in the background).
async fn remove_partitions(context: &NetContext, removed: &[PartitionRef]) -> Handled<()> {
    for partition in removed {
        let router::Route { key, owner } = router::ref_route(partition, context.shards);
        partition_op(context, owner, |reply| PartitionOp::Remove { key, reply }).await?;
    }
    Ok(())
}

/// Push a topic's (possibly updated) settings to its partitions' owners.
async fn refresh_settings(
    context: &NetContext,
    view: &MetadataView,
    stream_id: u32,
    topic_id: u32,
) -> Handled<()> {
    let Some(stream) = view.stream_by_id(stream_id) else {
        return Ok(());
    };
    let Some(topic) = stream.topic_by_id(topic_id) else {
        return Ok(());
    };
    let settings = PartitionSettings::from_topic(topic);
    for route in router::topic_routes(stream, topic, context.shards) {
        open_on_owner(context, route, settings).await?;
    }
    Ok(())
}

/// Create, update or delete streams, topics and partitions.
pub(crate) async fn change(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    command: NotSend<'_>,
) -> Handled<Outcome> {
    match &command {
        Command::CreateStream { .. } => principal.create_stream()?,
        Command::UpdateStream { stream, .. } | Command::DeleteStream { stream } => {
            let stream = request.view.stream(&Ident::from(stream))?;
            principal.manage_stream(stream.id)?;
        }
        Command::CreateTopic { stream, .. } => {
            let stream = request.view.stream(&Ident::from(stream))?;
            principal.create_topic(stream.id)?;
        }
        Command::UpdateTopic { stream, topic, .. } | Command::DeleteTopic { stream, topic } => {
            let (stream, topic) = named_topic(&request.view, stream, topic)?;
            principal.manage_topic(stream.id, topic.id)?;
        }
        Command::CreatePartitions { stream, topic, .. }
        | Command::DeletePartitions { stream, topic, .. } => {
            let (stream, topic) = named_topic(&request.view, stream, topic)?;
            principal.manage_partitions(stream.id, topic.id)?;
        }
        _ => {}
    }
    let (applied, view, _) = prepare_and_apply(request, &command).await?;
    let context = request.context;
    let mut out = Vec::new();
    match applied {
        Applied::StreamCreated { stream_id } => {
            if let Some(stream) = view.stream_by_id(stream_id) {
                encode_stream_with_topics(&mut out, stream, &PartitionReports::default());
            }
        }
        Applied::TopicCreated {
            stream_id,
            topic_id,
            created,
        } => {
            open_partitions(context, &view, &created).await?;
            if let Some(stream) = view.stream_by_id(stream_id)
                && let Some(topic) = stream.topic_by_id(topic_id)
            {
                encode_topic_with_partitions(&mut out, stream, topic, &PartitionReports::default());
            }
        }
        Applied::TopicUpdated {
            stream_id,
            topic_id,
        } => {
            refresh_settings(context, &view, stream_id, topic_id).await?;
        }
        Applied::StreamDeleted { removed, .. } | Applied::TopicDeleted { removed, .. } => {
            remove_partitions(context, &removed).await?;
        }
        // The partition count decides each partition's `max_topic_size`
        // share: the survivors and the new ones get the new share.
        Applied::PartitionsDeleted { removed, .. } => {
            remove_partitions(context, &removed).await?;
            if let Some(first) = removed.first() {
                refresh_settings(context, &view, first.stream_id, first.topic_id).await?;
            }
        }
        Applied::PartitionsCreated { created, .. } => {
            open_partitions(context, &view, &created).await?;
            if let Some(first) = created.first() {
                refresh_settings(context, &view, first.stream_id, first.topic_id).await?;
            }
        }
        _ => {}
    }
    Ok(request.replier.ok(&out))
}

/// PurgeStream and PurgeTopic: every partition of the named stream's
/// topics, or of the one named topic, is emptied on its owner (durable
/// before the reply; a replicated partition's purge is an entry of its
/// group, committed and applied on this node before the reply). Both need
/// the right to manage what they name.
pub(crate) async fn purge(
    request: &Request_<'_>,
    principal: &Principal<'_>,
    command: NotSend<'_>,
) -> Handled<Outcome> {
    let (stream, topics): (&Stream, Vec<&Topic>) = match command {
        Command::PurgeStream { stream } => {
            let stream = request.view.stream(&Ident::from(&stream))?;
            principal.manage_stream(stream.id)?;
            (stream, stream.topics.values().collect())
        }
        Command::PurgeTopic { stream, topic } => {
            let (stream, topic) = named_topic(&request.view, &stream, &topic)?;
            principal.manage_topic(stream.id, topic.id)?;
            (stream, vec![topic])
        }
        _ => return Err(HandlerError::Status(Status::InvalidCommand)),
    };
    let context = request.context;
    for topic in topics {
        for router::Route { key, owner } in router::topic_routes(stream, topic, context.shards) {
            partition_op(context, owner, |reply| PartitionOp::Purge { key, reply }).await?;
        }
    }
    Ok(request.replier.empty())
}
