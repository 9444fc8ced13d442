//! The pump's reads: polls by every strategy, capped at what the topic's
//! durability lets a consumer see, with auto-commit; and polls parked while
//! their disk read is in flight, which the shard loop wakes
//! ([`Pump::poll_parked`]) and the pump answers when the read completes, so
//! one consumer replaying from the disk never stalls the shard's other
//! partitions.
//!
//! Must not: change a partition's messages; the only write a poll makes is
//! its auto-committed consumer offset (`offsets.rs` admits it).

use super::*;

/// A poll whose read waits for the disk: answered when the read is done.
pub(super) struct ParkedPoll {
    key: PartitionKey,
    request: PollRequest,
    reply: Reply<PollResult>,
}

impl<I: StorageIo + Clone + 'static> Pump<I> {
    /// Serve a poll; returns the offset durability when auto-commit stored
    /// an offset that must be synced before the reply.
    ///
    /// On a `persisted` topic a poll sees only durable messages: a consumer
    /// never reads a message that a crash could still take back (and that
    /// its producer has not been acknowledged for).
    /// Runs a poll and answers it. With `park`, a poll whose read must wait
    /// for the disk is parked instead (its read goes on; the shard loop
    /// resumes it when [`Pump::poll_parked`] is ready), so one consumer
    /// reading old data does not hold up every other partition of the
    /// shard. A resumed poll runs with `park` off: it waits for what is
    /// still missing, so no poll is parked twice.
    pub(super) async fn run_poll(
        &mut self,
        key: PartitionKey,
        request: PollRequest,
        reply: Reply<PollResult>,
        park: bool,
    ) {
        self.set_park_reads(key, park);
        self.auto_commit = None;
        let outcome = self.poll(key, request).await;
        self.set_park_reads(key, false);
        if let (Ok((result, _)), Some((consumer, offset))) = (&outcome, self.auto_commit.take()) {
            // A replicated partition: the poll is answered once its
            // offset is committed (or with why not).
            let result = result.clone();
            self.propose_offset_write(
                key,
                OffsetWrite::Store { consumer, offset },
                Box::new(move |stored| send(reply, stored.map(|()| result))),
            );
            return;
        }
        match outcome {
            Err(PumpError::Storage(StorageError::ReadInFlight)) => {
                self.counters.polls_parked += 1;
                self.parked.push(ParkedPoll {
                    key,
                    request,
                    reply,
                });
            }
            Ok((result, Some(Durability::Persisted))) => {
                self.offsets_sync.insert(key);
                self.park(key, Need::OffsetsSynced, Answer::Poll { result, reply });
            }
            Ok((result, _)) => send(reply, Ok(result)),
            Err(error) => {
                self.note_fatal(key, &error);
                send(reply, Err(error));
            }
        }
    }

    pub(super) fn set_park_reads(&self, key: PartitionKey, park: bool) {
        if let Some(partition) = self.partitions.get(&key) {
            partition.log.set_park_reads(park);
        }
    }

    /// Ready when a parked poll can go on: its partition's read is done (or
    /// gone). Polls every parked read, so `cx` is woken by the first that
    /// completes.
    pub fn poll_parked(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let mut ready = false;
        for parked in &self.parked {
            let done = self
                .partitions
                .get(&parked.key)
                .is_none_or(|partition| partition.log.poll_read(cx).is_ready());
            ready |= done;
        }
        if ready {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }

    /// Answers every parked poll, each as soon as its read is done (for
    /// callers that drive a pump without the shard loop).
    pub async fn finish_parked(&mut self) {
        while !self.parked.is_empty() {
            std::future::poll_fn(|cx| self.poll_parked(cx)).await;
            self.resume_parked(false).await;
        }
    }

    /// Answers the parked polls whose reads are done (all of them with
    /// `all`, waiting where needed: the shard is stopping).
    pub async fn resume_parked(&mut self, all: bool) {
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        for parked in std::mem::take(&mut self.parked) {
            let ready = all
                || self
                    .partitions
                    .get(&parked.key)
                    .is_none_or(|partition| partition.log.poll_read(&mut context).is_ready());
            if ready {
                self.run_poll(parked.key, parked.request, parked.reply, false)
                    .await;
            } else {
                self.parked.push(parked);
            }
        }
    }

    pub(super) async fn poll(
        &mut self,
        key: PartitionKey,
        request: PollRequest,
    ) -> Result<(PollResult, Option<Durability>), PumpError> {
        if request.auto_commit
            && let Some(consumer) = request.consumer
        {
            self.admit_offset(key, consumer)?;
        }
        let readable = self
            .partitions
            .get(&key)
            .and_then(|partition| partition.replica.as_ref())
            .map(|replica| replica.group.readable());
        let replicated = readable.is_some();
        if readable == Some(false) {
            // Its group applies what its log records committed first (a
            // purge among it): until then, 58, which the SDK retries.
            return Err(PumpError::NotLeader { leader: None });
        }
        if replicated && matches!(request.strategy, PollingStrategy::Next) {
            self.offsets_readable(key).await?;
        }
        let partition = self.partition(key)?;
        let highest_visible = partition.highest_visible();
        let current_offset = highest_visible.unwrap_or(0);
        let empty = PollResult::empty(current_offset);
        let first = partition.first_readable();
        let Some(highest) = highest_visible.filter(|highest| *highest >= first) else {
            return Ok((empty, None));
        };
        if request.count == 0 {
            return Ok((empty, None));
        }
        let cap = request.bytes_max;
        let start = match request.strategy {
            PollingStrategy::Offset(offset) => offset.max(first),
            PollingStrategy::First => first,
            PollingStrategy::Last => (highest + 1)
                .saturating_sub(u64::from(request.count))
                .max(first),
            PollingStrategy::Next => {
                let stored = request
                    .consumer
                    .and_then(|consumer| partition.offsets.get(consumer));
                stored.map_or(0, |stored| stored + 1).max(first)
            }
            PollingStrategy::Timestamp(timestamp) => {
                let probe = partition.log.read_by_timestamp(timestamp, 1, cap).await?;
                match probe.first_offset {
                    Some(offset) => offset.max(first),
                    None => return Ok((empty, None)),
                }
            }
        };
        if start > highest {
            return Ok((empty, None));
        }
        let visible = highest - start + 1;
        let count = u64::from(request.count).min(visible) as u32;
        let read = partition
            .log
            .read_by_offset_into(start, count, cap, POLL_HEADROOM)
            .await?;
        assert!(read.headroom == POLL_HEADROOM);
        // A consumer never sees past what the topic's durability lets it
        // (a `persisted` topic: nothing a crash could take back).
        if let (Some(first), Some(last)) = (read.first_offset, read.last_offset) {
            assert!(first >= start);
            assert!(last <= highest);
            assert!(read.message_count <= count);
        }
        let records = read.records_len();
        let result = PollResult {
            current_offset,
            message_count: read.message_count,
            bytes: read.bytes,
            shared: read.shared,
        };
        let mut stored = None;
        if request.auto_commit
            && let (Some(consumer), Some(last)) = (request.consumer, read.last_offset)
        {
            if replicated {
                self.auto_commit = Some((consumer, last));
            } else {
                partition.offsets.store(consumer, last).await?;
                stored = Some(partition.settings.offset_durability);
            }
        }
        self.counters.messages_out += u64::from(result.message_count);
        self.counters.bytes_out += records as u64;
        Ok((result, stored))
    }
}
