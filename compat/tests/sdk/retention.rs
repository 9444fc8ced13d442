//! Size-based retention (`max_topic_size`).

use crate::common::*;
use iggy::prelude::*;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// Proves `max_topic_size` is enforced: with 1 MiB segments, a 3 MiB cap and
/// ~6 MiB produced over two partitions, the retention check (every 200 ms
/// here, `retention.check_interval`) deletes the oldest sealed segments of
/// each partition until the topic is back under the cap, never the active
/// segment, so the newest messages stay readable and the oldest are gone.
#[tokio::test]
async fn max_topic_size_deletes_the_oldest_segments() {
    let daemon = SdkDaemon::start_with(&[("IGGYD_RETENTION__CHECK_INTERVAL", "200ms")]);
    let client = daemon.root_client().await;
    client.create_stream("s").await.unwrap();
    let options = TopicCreateOptions {
        segment_size: Some(IggyByteSize::from(MIB)),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(3 * MIB))),
        ..topic_options(2)
    };
    client
        .create_topic(&named("s"), "t", &options)
        .await
        .unwrap();

    // 2 partitions × 24 batches × 8 × 16 KiB = 6 MiB of payload.
    let payload = vec![b'r'; 16 * 1024];
    for round in 0..24u64 {
        for partition in 0..2 {
            let mut batch: Vec<IggyMessage> = (0..8)
                .map(|index| {
                    let mut bytes = payload.clone();
                    bytes[..16].copy_from_slice(&(round * 8 + index).to_le_bytes().repeat(2));
                    IggyMessage::from(bytes)
                })
                .collect();
            client
                .send_messages(
                    &named("s"),
                    &named("t"),
                    &Partitioning::partition_id(partition),
                    &mut batch,
                )
                .await
                .unwrap();
        }
    }

    let topic_size = || async {
        client
            .get_topic(&named("s"), &named("t"))
            .await
            .unwrap()
            .unwrap()
    };
    eventually(
        Duration::from_secs(20),
        "topic back under max_topic_size",
        || async { topic_size().await.size.as_bytes_u64() <= 3 * MIB },
    )
    .await;
    let topic = topic_size().await;
    let consumer = Consumer::new(named("c"));
    for partition in &topic.partitions {
        assert!(partition.segments_count >= 1, "{topic:?}");
        let first = poll(
            &client,
            "s",
            "t",
            partition.id,
            &consumer,
            PollingStrategy::first(),
            1,
            false,
        )
        .await;
        assert!(
            first.messages[0].header.offset > 0,
            "partition {}: the oldest messages were deleted: {topic:?}",
            partition.id
        );
        let last = poll(
            &client,
            "s",
            "t",
            partition.id,
            &consumer,
            PollingStrategy::last(),
            1,
            false,
        )
        .await;
        assert_eq!(offsets(&last), vec![24 * 8 - 1], "the newest message stays");
        assert_eq!(last.messages[0].payload.len(), payload.len());
    }
    daemon.assert_clean_log();
}
