//! Deterministic crash simulation of the metadata store (`MetadataStore`)
//! on the simulated disk that storage is tested on (`SimIo`, through
//! `io::SimDirIo`).
//!
//! This file owns the seeded metadata workload (also used by `tests.rs`),
//! the model it is checked against and the checks. For one seed it executes
//! random commands over a small id and name space (so rejections are as
//! common as successes) with snapshots every few commands, and between them
//! restarts the store: after a power loss (unsynced writes dropped, some
//! torn) or a plain process exit (the page cache keeps them), arms a failing
//! fsync a few fsyncs ahead (so it lands between the steps of an append, a
//! snapshot or a journal cut), or fills the disk. A failed execute poisons
//! the store, and the simulation restarts it the way systemd would.
//!
//! The model is a plain `Metadata` with every acknowledged command applied.
//! After every recovery the store must hold exactly the model (every
//! acknowledged change survives) or the model plus the one command whose
//! execute failed, applied whole (nothing unacknowledged is half-applied);
//! consumer-group members are reset by recovery on both sides. Seeds run
//! through the shared runner (`storage::sim_workload`): `IGGYD_SIM_SEED` and
//! `IGGYD_SIM_SEEDS` as for the other simulations. Must stay
//! deterministic: all randomness comes from the seed.

use super::command::{Ident, MetadataCommand as C};
use super::io::SimDirIo;
use super::model::{MemberKey, Metadata, UserStatus};
use super::options::{Durability, TopicOptions};
use super::store::{ExecuteError, MetadataStore, StoreError};
use iggyd_storage::sim::SimRng;
use iggyd_storage::sim_workload::run_seeds;
use iggyd_wire::protocol::permissions::Permissions;

const STEPS_PER_SEED: u64 = 300;
const SEEDS_DEFAULT: u64 = 100;

fn small(rng: &mut SimRng) -> u32 {
    rng.below(4) as u32
}

/// A random command over a small id/name space, so that both successes and
/// rejections are frequent.
pub(super) fn random_command(rng: &mut SimRng, step: u64) -> C {
    let stream = if rng.below(2) == 0 {
        Ident::Id(small(rng))
    } else {
        Ident::Name(format!("s{}", small(rng)))
    };
    let topic = Ident::Id(small(rng));
    let group = Ident::Id(small(rng));
    let member = MemberKey(u128::from(small(rng)));
    match rng.below(16) {
        0 | 1 => C::CreateStream {
            name: format!("s{}", small(rng)),
            created_at_us: step,
        },
        2 => C::DeleteStream { stream },
        3 => C::UpdateStream {
            stream,
            name: format!("s{}", small(rng)),
        },
        4 | 5 => C::CreateTopic {
            stream,
            name: format!("t{}", small(rng)),
            partitions_count: small(rng),
            options: TopicOptions::defaults(Durability::Replicated),
            created_at_us: step,
            shard_count: 3,
        },
        6 => C::DeleteTopic { stream, topic },
        7 => C::CreatePartitions {
            stream,
            topic,
            count: small(rng) + 1,
            created_at_us: step,
            shard_count: 3,
        },
        8 => C::DeletePartitions {
            stream,
            topic,
            count: small(rng) + 1,
        },
        9 => C::CreateConsumerGroup {
            stream,
            topic,
            name: format!("g{}", small(rng)),
        },
        10 => C::DeleteConsumerGroup {
            stream,
            topic,
            group,
        },
        11 | 12 => C::JoinConsumerGroup {
            stream,
            topic,
            group,
            member,
        },
        13 => C::LeaveConsumerGroup {
            stream,
            topic,
            group,
            member,
        },
        14 => C::MemberGone { member },
        _ => match rng.below(5) {
            0 => C::CreateUser {
                username: format!("user{}", small(rng)),
                password_hash: format!("hash{step}"),
                status: UserStatus::Active,
                permissions: Some(Permissions::default()),
                created_at_us: step,
            },
            1 => C::DeleteUser {
                user: Ident::Id(small(rng)),
            },
            2 => C::UpdatePermissions {
                user: Ident::Id(small(rng)),
                permissions: None,
            },
            3 => C::CreatePat {
                user_id: small(rng),
                name: format!("pat{}", small(rng)),
                token_hash: [step as u8; 32],
                expiry_at_us: None,
                created_at_us: step,
            },
            _ => C::DeletePat {
                user_id: small(rng),
                name: format!("pat{}", small(rng)),
            },
        },
    }
}

/// What the runs exercised, summed over seeds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Coverage {
    acknowledged: u64,
    rejected: u64,
    failed_executes: u64,
    power_losses: u64,
    process_restarts: u64,
    failed_recoveries: u64,
    torn_tails: u64,
    snapshots_loaded: u64,
    in_flight_survived: u64,
    in_flight_lost: u64,
}

impl Coverage {
    fn add(&mut self, other: &Coverage) {
        self.acknowledged += other.acknowledged;
        self.rejected += other.rejected;
        self.failed_executes += other.failed_executes;
        self.power_losses += other.power_losses;
        self.process_restarts += other.process_restarts;
        self.failed_recoveries += other.failed_recoveries;
        self.torn_tails += other.torn_tails;
        self.snapshots_loaded += other.snapshots_loaded;
        self.in_flight_survived += other.in_flight_survived;
        self.in_flight_lost += other.in_flight_lost;
    }
}

struct Sim {
    seed: u64,
    rng: SimRng,
    disk: SimDirIo,
    snapshot_interval: u64,
    /// `None` while the process is down.
    store: Option<MetadataStore<SimDirIo>>,
    /// Every acknowledged command applied, nothing else.
    model: Metadata,
    /// The command whose execute failed since the last recovery: it may
    /// survive whole or not at all.
    in_flight: Option<C>,
    step: u64,
    coverage: Coverage,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = SimRng::new(seed);
        let disk = SimDirIo::new(rng.next_u64());
        disk.io.set_torn_writes(true);
        let snapshot_interval = rng.range(2, 24);
        let mut sim = Sim {
            seed,
            rng,
            disk,
            snapshot_interval,
            store: None,
            model: Metadata::new(),
            in_flight: None,
            step: 0,
            coverage: Coverage::default(),
        };
        sim.start();
        sim
    }

    fn fail(&self, why: impl std::fmt::Display) -> ! {
        panic!("seed {}: step {}: {why}", self.seed, self.step)
    }

    /// Starts the process: recovery, then the checks against the model. A
    /// recovery that fails on an injected fault (it journals a member reset
    /// and may cut a torn tail) is a process that died while starting: the
    /// fault is spent, the next start goes on.
    fn start(&mut self) {
        for _ in 0..3 {
            match MetadataStore::open_with_interval(self.disk.clone(), self.snapshot_interval) {
                Ok((store, report)) => {
                    if report.torn_tail.is_some() {
                        self.coverage.torn_tails += 1;
                    }
                    if report.snapshot_seq.is_some() {
                        self.coverage.snapshots_loaded += 1;
                    }
                    self.check_recovered(store.metadata());
                    self.store = Some(store);
                    return;
                }
                Err(StoreError::Io { .. }) => {
                    self.coverage.failed_recoveries += 1;
                    self.disk.io.set_capacity(None);
                }
                Err(error) => self.fail(format!("recovery failed: {error}")),
            }
        }
        self.fail("recovery failed three times in a row");
    }

    /// The recovered state is the model, or the model plus the in-flight
    /// command applied whole; members reset on both.
    fn check_recovered(&mut self, recovered: &Metadata) {
        if let Err(why) = recovered.check_invariants() {
            self.fail(format!("recovered state breaks an invariant: {why}"));
        }
        // Recovery journals a member reset when there are members (its
        // `applied_commands` count included), and only then.
        let reset = |mut state: Metadata| {
            let has_members = state
                .streams()
                .flat_map(|stream| stream.topics.values())
                .flat_map(|topic| topic.groups.values())
                .any(|group| !group.members.is_empty());
            if has_members {
                state
                    .apply(C::ResetMembers)
                    .expect("resetting members never fails");
            }
            state
        };
        let acknowledged = reset(self.model.clone());
        let in_flight = self.in_flight.take();
        if *recovered == acknowledged {
            if in_flight.is_some() {
                self.coverage.in_flight_lost += 1;
            }
        } else {
            let Some(command) = in_flight else {
                self.fail("recovered state differs from every acknowledged change");
            };
            let mut with = self.model.clone();
            if let Err(error) = with.apply(command.clone()) {
                self.fail(format!("in-flight {command:?} does not apply: {error}"));
            }
            if *recovered != reset(with) {
                self.fail(format!(
                    "recovered state is neither the acknowledged state nor it plus {command:?}"
                ));
            }
            self.coverage.in_flight_survived += 1;
        }
        self.model = recovered.clone();
    }

    /// The process stops (with or without losing power) and starts again.
    fn restart(&mut self, power_loss: bool) {
        self.store = None;
        if power_loss {
            self.disk.io.crash();
            self.coverage.power_losses += 1;
        } else {
            self.coverage.process_restarts += 1;
        }
        // An operator (or retention elsewhere) frees space before the restart.
        self.disk.io.set_capacity(None);
        self.start();
    }

    fn execute(&mut self) {
        let command = random_command(&mut self.rng, self.step);
        let Some(store) = self.store.as_mut() else {
            self.fail("no store to execute on");
        };
        let outcome = store.execute(command.clone());
        let mut predicted = self.model.clone();
        let expected = predicted.apply(command.clone());
        match (outcome, expected) {
            (Ok(applied), Ok(expected)) => {
                if applied != expected {
                    self.fail(format!("{command:?}: {applied:?}, model says {expected:?}"));
                }
                self.model = predicted;
                self.coverage.acknowledged += 1;
            }
            (Err(ExecuteError::Rejected(error)), Err(expected)) => {
                if error != expected {
                    self.fail(format!("{command:?}: {error}, model says {expected}"));
                }
                self.coverage.rejected += 1;
            }
            (Err(ExecuteError::Fatal(_)), Ok(_)) => {
                // Not acknowledged: the store is poisoned, the process exits
                // and systemd starts it again.
                self.coverage.failed_executes += 1;
                self.in_flight = Some(command);
                let power_loss = self.rng.chance(1, 2);
                self.restart(power_loss);
            }
            (outcome, expected) => self.fail(format!(
                "{command:?}: store says {outcome:?}, model says {expected:?}"
            )),
        }
    }

    fn step(&mut self) {
        self.step += 1;
        match self.rng.below(100) {
            0..4 => self.restart(true),
            4..7 => self.restart(false),
            7..11 => {
                let successes = self.rng.below(4);
                self.disk.io.fail_fsync_after(successes);
            }
            11..13 => {
                let room = self.rng.below(200);
                let used = self.disk.io.used_bytes();
                self.disk.io.set_capacity(Some(used + room));
            }
            _ => self.execute(),
        }
    }
}

fn run_seed(seed: u64) -> Sim {
    let mut sim = Sim::new(seed);
    for _ in 0..STEPS_PER_SEED {
        sim.step();
    }
    let power_loss = sim.rng.chance(1, 2);
    sim.restart(power_loss);
    sim
}

// Runs the seeded metadata workload with crashes, torn writes, failed
// fsyncs and a full disk for every seed, checking after each recovery that
// every acknowledged change survived and nothing else is half-applied; a
// failure names its seed so that `IGGYD_SIM_SEED=<seed>` reproduces it.
#[test]
fn metadata_crash_simulation() {
    let runs = run_seeds("metadata", SEEDS_DEFAULT, |seed| run_seed(seed).coverage);
    let mut coverage = Coverage::default();
    for seed_coverage in &runs {
        coverage.add(seed_coverage);
    }
    eprintln!("metadata simulation: {coverage:?}");
    if runs.len() >= 50 {
        assert!(coverage.acknowledged > 0);
        assert!(coverage.rejected > 0);
        assert!(coverage.failed_executes > 0);
        assert!(coverage.power_losses > 0);
        assert!(coverage.process_restarts > 0);
        assert!(coverage.torn_tails > 0);
        assert!(coverage.snapshots_loaded > 0);
        assert!(coverage.in_flight_survived > 0);
        assert!(coverage.in_flight_lost > 0);
    }
}

// Same seed, same run: the metadata simulation is deterministic.
#[test]
fn metadata_crash_simulation_is_deterministic() {
    let first = run_seed(5);
    let second = run_seed(5);
    assert_eq!(first.disk.io.stats(), second.disk.io.stats());
    assert_eq!(first.coverage, second.coverage);
    assert_eq!(first.model, second.model);
}
