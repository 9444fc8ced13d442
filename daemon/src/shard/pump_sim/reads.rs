//! The pump simulation's reads: polls with every strategy, counts from one
//! message to everything (many read windows, which are small here, and
//! many segments), some with a small byte cap, each answer compared byte
//! for byte with the model; and replies held back like a slow socket's
//! while the pump goes on (more polls replacing the partition's windows,
//! appends, retention, purges, restarts) and checked again later: the
//! bytes a reply lends must not change until it is dropped, and a debug
//! build poisons every buffer the pool takes back, so a lent buffer that
//! was recycled shows.

use super::*;

/// Replies held back at once, at most.
const HELD_REPLIES_MAX: usize = 8;

/// A poll answer held back like a reply still being sent.
pub(super) struct HeldReply {
    key: PartitionKey,
    /// The records as they were when the answer was checked.
    records: Vec<u8>,
    result: PollResult,
}

/// The whole stored records of a poll answer.
fn batch_records(records: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = records;
    while let Ok(header) = BatchHeader::decode(rest) {
        let Some((record, after)) = rest.split_at_checked(header.batch_length as usize) else {
            break;
        };
        out.push(record);
        rest = after;
    }
    out
}

impl Sim {
    pub(super) fn random_strategy(&mut self, part: usize) -> PollingStrategy {
        let model = &self.parts[part];
        match self.rng.below(5) {
            0 => {
                let low = model.first_offset().saturating_sub(3);
                PollingStrategy::Offset(self.rng.range(low, model.next_offset() + 3))
            }
            1 => {
                let (low, high) = match (model.messages.first(), model.messages.last()) {
                    (Some(first), Some(last)) => (first.timestamp - 10, last.timestamp + 10),
                    _ => (0, 10),
                };
                PollingStrategy::Timestamp(self.rng.range(low, high))
            }
            2 => PollingStrategy::First,
            3 => PollingStrategy::Last,
            _ => PollingStrategy::Next,
        }
    }

    /// What the pump must answer to `request` right now.
    pub(super) fn expected_poll(&self, part: usize, request: &PollRequest) -> ExpectedPoll {
        let model = &self.parts[part];
        let visible_next = model.visible_next_offset();
        let current_offset = visible_next.saturating_sub(1);
        let empty = ExpectedPoll {
            current_offset,
            messages: Vec::new(),
            bytes_max: request.bytes_max,
        };
        let first = model.first_offset();
        if visible_next == 0 || visible_next - 1 < first || request.count == 0 {
            return empty;
        }
        let highest = visible_next - 1;
        let start = match request.strategy {
            PollingStrategy::Offset(offset) => offset.max(first),
            PollingStrategy::First => first,
            PollingStrategy::Last => (highest + 1)
                .saturating_sub(u64::from(request.count))
                .max(first),
            PollingStrategy::Next => request
                .consumer
                .and_then(|consumer| model.offsets.get(&consumer))
                .map_or(0, |stored| stored + 1)
                .max(first),
            PollingStrategy::Timestamp(timestamp) => {
                match model
                    .written_messages_list()
                    .iter()
                    .find(|message| message.timestamp >= timestamp)
                {
                    Some(message) => message.offset,
                    None => return empty,
                }
            }
        };
        if start > highest {
            return empty;
        }
        let count = u64::from(request.count).min(highest - start + 1);
        ExpectedPoll {
            current_offset,
            messages: model.messages_from(start, count),
            bytes_max: request.bytes_max,
        }
    }

    pub(super) fn check_poll(&mut self, part: usize, result: &PollResult, expected: &ExpectedPoll) {
        let key = self.parts[part].key;
        let got = decode_messages(&result.records(), u64::from(key.partition));
        assert_eq!(
            result.current_offset, expected.current_offset,
            "seed {}: poll of {key}: current offset",
            self.seed
        );
        assert_eq!(result.message_count as usize, got.len());
        let records = result.records();
        if got.len() < expected.messages.len() && expected.bytes_max < u64::MAX {
            // The byte cap ended the reply early: never before the first
            // record, and never with more than the cap beyond it.
            let batches = batch_records(&records);
            assert!(
                !got.is_empty()
                    && (batches.len() == 1 || records.len() as u64 <= expected.bytes_max),
                "seed {}: poll of {key}: a reply of {} messages in {} records ({} bytes) for a \
                 cap of {}",
                self.seed,
                got.len(),
                batches.len(),
                records.len(),
                expected.bytes_max
            );
            self.coverage.polls_capped += 1;
            for (got, expected) in got.iter().zip(&expected.messages) {
                assert_eq!(got, expected, "seed {}: capped poll of {key}", self.seed);
            }
            return;
        }
        assert_eq!(
            got.len(),
            expected.messages.len(),
            "seed {}: poll of {key}: got offsets {:?}, expected {:?}",
            self.seed,
            got.iter().map(|m| m.offset).collect::<Vec<_>>(),
            expected
                .messages
                .iter()
                .map(|m| m.offset)
                .collect::<Vec<_>>()
        );
        for (got, expected) in got.iter().zip(&expected.messages) {
            assert_eq!(
                got, expected,
                "seed {}: poll of {key}: message {} differs",
                self.seed, expected.offset
            );
        }
    }

    pub(super) fn poll(&mut self, part: usize) {
        let strategy = self.random_strategy(part);
        let count = match self.rng.below(5) {
            0 => 0,
            1 => 1,
            2 => self.rng.range(2, 20) as u32,
            3 => self.rng.range(20, 2_000) as u32,
            // Everything: many read windows and segments.
            _ => u32::MAX,
        };
        let consumer = (!self.rng.chance(1, 6))
            .then(|| CONSUMERS[self.rng.below(CONSUMERS.len() as u64) as usize]);
        // One poll in four has a small byte cap (the reply budget of a
        // busy shard): the reply is then a prefix of the model's answer,
        // so such polls do not auto-commit.
        let bytes_max = if self.rng.chance(1, 4) {
            self.rng.range(0, 3 * self.read_window_bytes as u64)
        } else {
            u64::MAX
        };
        let auto_commit = bytes_max == u64::MAX && self.rng.chance(1, 3);
        let request = PollRequest {
            consumer,
            strategy,
            count,
            auto_commit,
            bytes_max,
        };
        let expected = self.expected_poll(part, &request);
        let (reply, answer) = channel();
        let key = self.parts[part].key;
        // Now and then the disk holds its reads: a poll that needs one is
        // parked, then answered once the reads complete.
        let hold_reads = self.rng.chance(1, 4);
        self.io.hold_reads(hold_reads);
        let pump = &mut self.pumps[self.parts[part].shard];
        let parked_before = pump.counters.polls_parked;
        block_on(pump.apply(PartitionOp::Poll {
            key,
            request,
            reply,
        }));
        if hold_reads {
            self.io.hold_reads(false);
            block_on(pump.finish_parked());
        }
        self.coverage.polls_parked += pump.counters.polls_parked - parked_before;
        self.coverage.polls += 1;
        let stores = match (auto_commit, consumer, expected.messages.last()) {
            (true, Some(consumer), Some(last)) => Some((consumer, last.offset)),
            _ => None,
        };
        let model = &mut self.parts[part];
        let offsets_persisted = model.settings.offset_durability == Durability::Persisted;
        match (answer.try_recv(), stores) {
            (Ok(Err(error)), Some(_)) if self.disk_full && is_no_space(&error) => {
                self.coverage.offset_stores_refused_no_space += 1;
            }
            (Ok(Ok(result)), None) => {
                self.check_poll(part, &result, &expected);
                self.maybe_hold(part, result);
            }
            (Ok(Ok(result)), Some((consumer, offset))) if !offsets_persisted => {
                model.store_offset(consumer, Some(offset));
                self.coverage.polls_auto_commit += 1;
                self.check_poll(part, &result, &expected);
                self.maybe_hold(part, result);
            }
            (Err(flume::TryRecvError::Empty), Some((consumer, offset))) if offsets_persisted => {
                model.store_offset(consumer, Some(offset));
                model.offsets_sync_requested = true;
                self.coverage.polls_auto_commit += 1;
                self.park(Waiting::Poll {
                    part,
                    expected,
                    answer,
                });
            }
            (other, _) => self.fail(format!("poll of {key}: unexpected {other:?}")),
        }
    }

    /// Keeps some answers back (like replies a slow client has not read
    /// yet); when too many are held, the oldest is checked and let go.
    fn maybe_hold(&mut self, part: usize, result: PollResult) {
        if result.shared.is_none() || !self.rng.chance(1, 3) {
            return;
        }
        let records = result.records().into_owned();
        self.held.push(HeldReply {
            key: self.parts[part].key,
            records,
            result,
        });
        if self.held.len() > HELD_REPLIES_MAX {
            let oldest = self.held.remove(0);
            self.check_held(&oldest);
        }
    }

    /// A held reply still lends exactly the bytes it was checked with.
    fn check_held(&self, held: &HeldReply) {
        assert!(
            held.result.records().as_ref() == held.records.as_slice(),
            "seed {}: a held poll reply of {} changed while it was held",
            self.seed,
            held.key
        );
    }

    /// Checks and lets go of every held reply (at restarts and at the end).
    pub(super) fn release_held(&mut self) {
        for held in std::mem::take(&mut self.held) {
            self.check_held(&held);
            self.coverage.replies_held += 1;
        }
    }
}
