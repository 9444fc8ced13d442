//! Admission of clients, shared by every shard: how many connections may be
//! open (in all and per source address), how long a login from an address
//! that failed before must wait, and the security counters the admin
//! snapshot shows. A client can press on all of these; each is bounded.
//!
//! Connections: the cap is `limits.max_connections`, and never more than
//! the open-files limit minus the descriptors storage keeps (a base, a few
//! per shard, a few per partition, recomputed as partitions come and go),
//! so clients can never take the descriptors a segment rotation or the
//! metadata journal needs. `limits.max_connections_per_address` (else a
//! quarter of the cap) bounds one address. A connection over a cap is
//! closed by the acceptor before it is served. Addresses are counted by
//! host: IPv4 as is, IPv6 by its /64 (one host's share of addresses).
//!
//! Login backoff: after `k` failed logins from an address, its logins start
//! at least `min(max_login_backoff, login_backoff × 2^(k−1))` apart; a
//! success forgets the address, and so do `LOGIN_BACKOFF_FORGET_AFTER` of
//! quiet. The table is bounded (`LOGIN_BACKOFF_ADDRESSES_MAX`).
//!
//! The state sits behind one mutex held for a map lookup and never across
//! an await or any I/O; it is not shard state (shards still share nothing
//! they mutate on their own paths). Counters are relaxed atomics.
//! Must not: block, log, or know about sockets beyond the peer address.

use crate::limits;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// What bounds admission; from `[limits]` and the process limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// `limits.max_connections` (`None` = auto).
    pub max_connections: Option<u64>,
    /// `limits.max_connections_per_address` (`None` = auto).
    pub max_connections_per_address: Option<u64>,
    /// The soft RLIMIT_NOFILE the daemon runs with (`None` = unknown).
    pub descriptors: Option<u64>,
    pub shards: u64,
    pub login_backoff: Duration,
    pub max_login_backoff: Duration,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `cap` connections are open in all.
    Total { cap: u64 },
    /// `cap` connections are open from this address.
    PerAddress { cap: u64 },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Total { cap } => write!(
                f,
                "{cap} connections are open, the most allowed (limits.max_connections, bounded by \
                 the open-files limit minus the descriptors kept for storage)"
            ),
            Refusal::PerAddress { cap } => write!(
                f,
                "{cap} connections are open from this address, the most allowed \
                 (limits.max_connections_per_address)"
            ),
        }
    }
}

/// Security counters (monotone), for the admin snapshot.
#[derive(Debug, Default)]
pub struct SecurityCounters {
    pub connections_refused: AtomicU64,
    pub logins_failed: AtomicU64,
    pub logins_refused: AtomicU64,
    pub frames_refused: AtomicU64,
    pub timeouts: AtomicU64,
    pub tls_failures: AtomicU64,
    pub evictions: AtomicU64,
}

/// A copy of the counters and the current caps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SecuritySnapshot {
    pub connections_refused: u64,
    pub logins_failed: u64,
    pub logins_refused: u64,
    pub frames_refused: u64,
    pub timeouts: u64,
    pub tls_failures: u64,
    pub evictions: u64,
    pub connections: u64,
    pub max_connections: u64,
    pub max_connections_per_address: u64,
}

impl SecurityCounters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct Failures {
    /// Consecutive failed logins from the address.
    count: u32,
    /// The earliest time the next login from the address may start.
    next_start: Instant,
    last_failure: Instant,
}

#[derive(Debug, Default)]
struct State {
    connections: u64,
    per_address: HashMap<IpAddr, u64>,
    failures: HashMap<IpAddr, Failures>,
    /// Partitions at the last admission, for the snapshot's caps.
    partitions: u64,
}

#[derive(Debug)]
pub struct Admission {
    limits: AdmissionLimits,
    state: Mutex<State>,
    pub counters: SecurityCounters,
}

/// An admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    address: IpAddr,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.admission.lock();
        state.connections = state.connections.saturating_sub(1);
        if let Some(count) = state.per_address.get_mut(&self.address) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.per_address.remove(&self.address);
            }
        }
    }
}

/// The host part of an address that admission counts: IPv4 (also when
/// mapped into IPv6) as is, IPv6 by its /64.
pub fn address_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(prefix.into())
            }
        },
    }
}

/// `min(cap, base × 2^(failures−1))`; zero without failures or base.
pub fn backoff(base: Duration, cap: Duration, failures: u32) -> Duration {
    if failures == 0 || base.is_zero() {
        return Duration::ZERO;
    }
    let shift = (failures - 1).min(30);
    base.saturating_mul(1u32 << shift).min(cap)
}

impl Admission {
    pub fn new(limits: AdmissionLimits) -> Arc<Admission> {
        assert!(limits.shards > 0);
        Arc::new(Admission {
            limits,
            state: Mutex::new(State::default()),
            counters: SecurityCounters::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Descriptors kept for everything but client connections with
    /// `partitions` partitions.
    pub fn descriptors_reserved(&self, partitions: u64) -> u64 {
        limits::DESCRIPTORS_RESERVED_BASE
            .saturating_add(
                limits::DESCRIPTORS_RESERVED_PER_SHARD.saturating_mul(self.limits.shards),
            )
            .saturating_add(limits::DESCRIPTORS_PER_PARTITION.saturating_mul(partitions))
    }

    /// The connection caps `(in all, per address)` with `partitions`
    /// partitions.
    pub fn caps(&self, partitions: u64) -> (u64, u64) {
        let by_descriptors = match self.limits.descriptors {
            Some(descriptors) => descriptors.saturating_sub(self.descriptors_reserved(partitions)),
            None => limits::CONNECTIONS_LIMIT,
        };
        let total = self
            .limits
            .max_connections
            .unwrap_or(limits::CONNECTIONS_LIMIT)
            .min(by_descriptors);
        let per_address = self
            .limits
            .max_connections_per_address
            .unwrap_or((total / limits::CONNECTIONS_PER_ADDRESS_SHARE).max(1))
            .min(total);
        (total, per_address)
    }

    /// Admit a connection from `peer` while `partitions` partitions exist,
    /// or say which cap it would pass (and count the refusal).
    pub fn admit(self: &Arc<Self>, peer: IpAddr, partitions: u64) -> Result<Ticket, Refusal> {
        let (total, per_address) = self.caps(partitions);
        let address = address_key(peer);
        let mut state = self.lock();
        state.partitions = partitions;
        let refusal = if state.connections >= total {
            Some(Refusal::Total { cap: total })
        } else if state.per_address.get(&address).copied().unwrap_or(0) >= per_address {
            Some(Refusal::PerAddress { cap: per_address })
        } else {
            None
        };
        if let Some(refusal) = refusal {
            drop(state);
            SecurityCounters::bump(&self.counters.connections_refused);
            return Err(refusal);
        }
        state.connections += 1;
        *state.per_address.entry(address).or_insert(0) += 1;
        drop(state);
        Ok(Ticket {
            admission: self.clone(),
            address,
        })
    }

    /// How long a login from `peer` must wait before it may be checked
    /// (zero for an address without recent failures); taking the turn
    /// reserves the next one, so logins from one address are spaced out
    /// however many connections it uses.
    pub fn login_turn(&self, peer: IpAddr, now: Instant) -> Duration {
        if self.limits.login_backoff.is_zero() {
            return Duration::ZERO;
        }
        let address = address_key(peer);
        let mut state = self.lock();
        let Some(failures) = state.failures.get_mut(&address) else {
            return Duration::ZERO;
        };
        if now.saturating_duration_since(failures.last_failure)
            >= limits::LOGIN_BACKOFF_FORGET_AFTER
        {
            state.failures.remove(&address);
            return Duration::ZERO;
        }
        let spacing = backoff(
            self.limits.login_backoff,
            self.limits.max_login_backoff,
            failures.count,
        );
        let start = failures.next_start.max(now);
        failures.next_start = start + spacing;
        start - now
    }

    /// A login from `peer` failed: count it and push its next turn out.
    pub fn login_failed(&self, peer: IpAddr, now: Instant) {
        SecurityCounters::bump(&self.counters.logins_failed);
        if self.limits.login_backoff.is_zero() {
            return;
        }
        let address = address_key(peer);
        let mut state = self.lock();
        if !state.failures.contains_key(&address)
            && state.failures.len() >= limits::LOGIN_BACKOFF_ADDRESSES_MAX
        {
            // Forget what is stale; when nothing is, forget one address
            // (the map's order is arbitrary, so an attacker cannot choose
            // which): the table stays bounded at O(1) cost.
            state.failures.retain(|_, failures| {
                now.saturating_duration_since(failures.last_failure)
                    < limits::LOGIN_BACKOFF_FORGET_AFTER
            });
            if state.failures.len() >= limits::LOGIN_BACKOFF_ADDRESSES_MAX
                && let Some(victim) = state.failures.keys().next().copied()
            {
                state.failures.remove(&victim);
            }
        }
        let failures = state.failures.entry(address).or_insert(Failures {
            count: 0,
            next_start: now,
            last_failure: now,
        });
        failures.count = failures.count.saturating_add(1);
        failures.last_failure = now;
        let wait = backoff(
            self.limits.login_backoff,
            self.limits.max_login_backoff,
            failures.count,
        );
        failures.next_start = failures.next_start.max(now + wait);
    }

    /// A login from `peer` succeeded: its failures are forgotten.
    pub fn login_succeeded(&self, peer: IpAddr) {
        if self.limits.login_backoff.is_zero() {
            return;
        }
        self.lock().failures.remove(&address_key(peer));
    }

    pub fn snapshot(&self) -> SecuritySnapshot {
        let (connections, partitions) = {
            let state = self.lock();
            (state.connections, state.partitions)
        };
        let (max_connections, max_connections_per_address) = self.caps(partitions);
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let counters = &self.counters;
        SecuritySnapshot {
            connections_refused: read(&counters.connections_refused),
            logins_failed: read(&counters.logins_failed),
            logins_refused: read(&counters.logins_refused),
            frames_refused: read(&counters.frames_refused),
            timeouts: read(&counters.timeouts),
            tls_failures: read(&counters.tls_failures),
            evictions: read(&counters.evictions),
            connections,
            max_connections,
            max_connections_per_address,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(limits: AdmissionLimits) -> Arc<Admission> {
        Admission::new(limits)
    }

    const LIMITS: AdmissionLimits = AdmissionLimits {
        max_connections: None,
        max_connections_per_address: None,
        descriptors: Some(1024),
        shards: 2,
        login_backoff: Duration::from_millis(100),
        max_login_backoff: Duration::from_secs(1),
    };

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    // Proves the derived caps: the open-files limit minus the base, the
    // per-shard and the per-partition reserve, a quarter of that per
    // address; configured values apply but never beyond the descriptors.
    #[test]
    fn caps_follow_descriptors_and_partitions() {
        let derived = admission(LIMITS);
        assert_eq!(derived.caps(0), (1024 - 128 - 16, 220));
        assert_eq!(derived.caps(10), (1024 - 128 - 16 - 50, 207));
        // More partitions than descriptors: nothing is left for clients.
        assert_eq!(derived.caps(1000), (0, 0));
        let configured = admission(AdmissionLimits {
            max_connections: Some(5000),
            max_connections_per_address: Some(3),
            ..LIMITS
        });
        assert_eq!(configured.caps(0), (880, 3));
        let unknown = admission(AdmissionLimits {
            descriptors: None,
            max_connections: Some(10),
            ..LIMITS
        });
        assert_eq!(unknown.caps(0), (10, 2));
    }

    // Proves a connection over either cap is refused and counted, and a
    // dropped ticket frees its place (per address and in all).
    #[test]
    fn tickets_count_and_free_places() {
        let admission = admission(AdmissionLimits {
            max_connections: Some(3),
            max_connections_per_address: Some(2),
            ..LIMITS
        });
        let first = admission.admit(ip("10.0.0.1"), 0).unwrap();
        let second = admission.admit(ip("10.0.0.1"), 0).unwrap();
        assert_eq!(
            admission.admit(ip("10.0.0.1"), 0).unwrap_err(),
            Refusal::PerAddress { cap: 2 }
        );
        let third = admission.admit(ip("10.0.0.2"), 0).unwrap();
        assert_eq!(
            admission.admit(ip("10.0.0.3"), 0).unwrap_err(),
            Refusal::Total { cap: 3 }
        );
        drop(first);
        let again = admission.admit(ip("10.0.0.1"), 0).unwrap();
        let snapshot = admission.snapshot();
        assert_eq!(snapshot.connections_refused, 2);
        assert_eq!(snapshot.connections, 3);
        drop((second, third, again));
        assert_eq!(admission.snapshot().connections, 0);
        assert!(admission.lock().per_address.is_empty());
    }

    // Proves IPv6 peers are counted by /64 and IPv4-mapped ones as IPv4.
    #[test]
    fn addresses_are_counted_by_host() {
        assert_eq!(
            address_key(ip("2001:db8:1:2:aaaa::1")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(address_key(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
        let admission = admission(AdmissionLimits {
            max_connections_per_address: Some(1),
            ..LIMITS
        });
        let _held = admission.admit(ip("2001:db8::1"), 0).unwrap();
        assert!(admission.admit(ip("2001:db8::2"), 0).is_err());
        assert!(admission.admit(ip("2001:db8:0:1::2"), 0).is_ok());
    }

    // Proves the backoff: doubling from the base to the cap, logins from
    // one address spaced by it whatever the connection, a success or a
    // long quiet forgets the address, and other addresses never wait.
    #[test]
    fn failed_logins_space_out_later_ones() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(1);
        assert_eq!(backoff(base, cap, 0), Duration::ZERO);
        assert_eq!(backoff(base, cap, 1), base);
        assert_eq!(backoff(base, cap, 3), Duration::from_millis(400));
        assert_eq!(backoff(base, cap, 5), cap);
        assert_eq!(backoff(base, cap, u32::MAX), cap);
        assert_eq!(backoff(Duration::ZERO, cap, 9), Duration::ZERO);

        let admission = admission(LIMITS);
        let now = Instant::now();
        let attacker = ip("192.0.2.7");
        assert_eq!(admission.login_turn(attacker, now), Duration::ZERO);
        admission.login_failed(attacker, now);
        admission.login_failed(attacker, now);
        // Two failures: the next start is 200 ms out, and each later turn
        // is another 200 ms after the one before.
        assert_eq!(
            admission.login_turn(attacker, now),
            Duration::from_millis(200)
        );
        assert_eq!(
            admission.login_turn(attacker, now),
            Duration::from_millis(400)
        );
        assert_eq!(admission.login_turn(ip("192.0.2.8"), now), Duration::ZERO);
        assert_eq!(admission.snapshot().logins_failed, 2);
        admission.login_succeeded(attacker);
        assert_eq!(admission.login_turn(attacker, now), Duration::ZERO);
        admission.login_failed(attacker, now);
        let later = now + limits::LOGIN_BACKOFF_FORGET_AFTER;
        assert_eq!(admission.login_turn(attacker, later), Duration::ZERO);
    }

    // Proves the failure table stays bounded however many addresses fail.
    #[test]
    fn the_failure_table_is_bounded() {
        let admission = admission(LIMITS);
        let now = Instant::now();
        for n in 0..(limits::LOGIN_BACKOFF_ADDRESSES_MAX as u32 + 100) {
            admission.login_failed(IpAddr::V4(n.into()), now);
        }
        assert_eq!(
            admission.lock().failures.len(),
            limits::LOGIN_BACKOFF_ADDRESSES_MAX
        );
    }
}
