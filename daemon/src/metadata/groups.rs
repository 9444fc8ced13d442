//! Consumer-group assignment: which member reads which partitions.
//!
//! The rule (deterministic and fair, §8 item 4): members in join order,
//! partitions by id, partition `i` goes to member `i mod n`. Every member
//! therefore holds ⌊p/n⌋ or ⌈p/n⌉ partitions. The assignment is recomputed
//! from scratch on every join, leave and partition change, and the
//! generation is bumped each time, so a client comparing generations knows
//! its assignment may have moved.
//!
//! Must not: keep state of its own (it is a pure function of the member
//! list and the partition count) or know about sessions beyond the key.

use super::model::{ConsumerGroup, Member};

/// Recomputes every member's partitions for a topic with `partitions_count`
/// partitions and bumps the generation.
pub fn rebalance(group: &mut ConsumerGroup, partitions_count: usize) {
    for member in &mut group.members {
        member.partitions.clear();
    }
    let members = group.members.len();
    if members > 0 {
        for partition in 0..partitions_count {
            let id = u32::try_from(partition).unwrap_or(u32::MAX);
            if let Some(member) = group.members.get_mut(partition % members) {
                member.partitions.push(id);
            }
        }
    }
    group.generation = group.generation.wrapping_add(1);
    debug_assert!(check_assignment(group, partitions_count).is_ok());
}

/// Adds a member at the end of the join order; false when already there.
pub fn join(group: &mut ConsumerGroup, member: Member, partitions_count: usize) -> bool {
    if group.member(member.key).is_some() {
        return false;
    }
    group.members.push(member);
    rebalance(group, partitions_count);
    true
}

/// Checks the assignment invariants: unique members, disjoint sorted
/// partition lists that cover every partition when there are members.
pub fn check_assignment(group: &ConsumerGroup, partitions_count: usize) -> Result<(), String> {
    let mut seen = vec![false; partitions_count];
    let mut keys: Vec<_> = group.members.iter().map(|member| member.key).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|pair| pair.first() == pair.get(1)) {
        return Err(format!("group {} has a duplicate member", group.id));
    }
    for member in &group.members {
        if member
            .partitions
            .windows(2)
            .any(|pair| pair.first() >= pair.get(1))
        {
            return Err(format!("group {} has an unsorted assignment", group.id));
        }
        for partition in &member.partitions {
            let slot = usize::try_from(*partition)
                .ok()
                .and_then(|index| seen.get_mut(index))
                .ok_or_else(|| format!("group {} assigns a missing partition", group.id))?;
            if *slot {
                return Err(format!("group {} assigns a partition twice", group.id));
            }
            *slot = true;
        }
    }
    if !group.members.is_empty() && seen.iter().any(|assigned| !assigned) {
        return Err(format!("group {} leaves a partition unassigned", group.id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MemberKey;

    fn group() -> ConsumerGroup {
        ConsumerGroup {
            id: 0,
            name: "g".into(),
            members: Vec::new(),
            generation: 0,
        }
    }

    fn member(key: u128) -> Member {
        Member {
            key: MemberKey(key),
            partitions: Vec::new(),
        }
    }

    // Proves fairness: for every member/partition count the loads differ by
    // at most one and the assignment covers every partition exactly once.
    #[test]
    fn assignment_is_fair_and_complete() {
        for members in 1..=7u128 {
            for partitions in 0..=20usize {
                let mut group = group();
                for key in 0..members {
                    join(&mut group, member(key), partitions);
                }
                check_assignment(&group, partitions).unwrap();
                let loads: Vec<usize> = group.members.iter().map(|m| m.partitions.len()).collect();
                let min = loads.iter().min().unwrap();
                let max = loads.iter().max().unwrap();
                assert!(max - min <= 1, "{members} members, {partitions} partitions");
            }
        }
    }

    // Proves determinism (same join order, same assignment) and that a
    // repeated join changes nothing, not even the generation.
    #[test]
    fn assignment_is_deterministic_and_join_idempotent() {
        let mut first = group();
        let mut second = group();
        for key in [5u128, 1, 9] {
            join(&mut first, member(key), 10);
            join(&mut second, member(key), 10);
        }
        assert_eq!(first, second);
        assert_eq!(first.assignment(MemberKey(5)), Some(&[0, 3, 6, 9][..]));
        assert_eq!(first.assignment(MemberKey(1)), Some(&[1, 4, 7][..]));
        assert_eq!(first.generation, 3);
        assert!(!join(&mut first, member(1), 10));
        assert_eq!(first.generation, 3);
        assert_eq!(first.member_slot(MemberKey(9)), Some(2));
    }
}
