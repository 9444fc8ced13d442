//! Consumer-group assignment: which member reads which partitions.
//!
//! Leaves, disconnects and partition changes reassign at once with the
//! round-robin rule (deterministic and fair, §8 item 4): members in join
//! order, partitions by id, partition `i` goes to member `i mod n`, so every
//! member holds ⌊p/n⌋ or ⌈p/n⌉ partitions.
//!
//! A join is cooperative (as Apache serves it): existing members keep what
//! they hold, and the partitions the newcomer should get (its ⌊p/(n+1)⌋
//! share, taken from the members holding the most, highest ids first) are
//! only marked as pending hand-offs. The current owner keeps serving such a
//! partition until it has committed everything it polled from it, or until
//! the rebalance timeout; then [`complete_moves`] hands it over. The new
//! owner therefore starts after the last committed offset, and no message is
//! delivered twice. A group without members gives a newcomer everything at
//! once. The generation is bumped on every change, so a client comparing
//! generations knows its assignment may have moved.
//!
//! Must not: keep state of its own (it is a pure function of the group and
//! the partition count), read a clock (the timeout is the shards' to keep),
//! or know about sessions beyond the key.

use super::model::{ConsumerGroup, Member, MemberKey, PendingMove};

/// Recomputes every member's partitions for a topic with `partitions_count`
/// partitions, drops pending hand-offs, and bumps the generation.
pub fn rebalance(group: &mut ConsumerGroup, partitions_count: usize) {
    for member in &mut group.members {
        member.partitions.clear();
    }
    group.pending.clear();
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
/// The first member gets every partition; a later one gets its share as
/// pending hand-offs from the members holding the most.
pub fn join(group: &mut ConsumerGroup, member: Member, partitions_count: usize) -> bool {
    if group.member(member.key).is_some() {
        return false;
    }
    if group.members.is_empty() {
        group.members.push(member);
        rebalance(group, partitions_count);
        return true;
    }
    let key = member.key;
    group.members.push(member);
    let share = partitions_count / group.members.len();
    let mut owed = share.saturating_sub(
        group
            .members
            .last()
            .map_or(0, |member| member.partitions.len())
            + group
                .pending
                .iter()
                .filter(|pending| pending.to == key)
                .count(),
    );
    while owed > 0 {
        // The member keeping the most partitions once its pending
        // hand-offs are gone gives one; ties go to the earliest joined.
        let kept = |member: &Member| {
            member
                .partitions
                .iter()
                .filter(|partition| group.pending_move(**partition).is_none())
                .count()
        };
        let mut donor: Option<&Member> = None;
        for candidate in group.members.iter().filter(|member| member.key != key) {
            if donor.is_none_or(|best| kept(candidate) > kept(best)) {
                donor = Some(candidate);
            }
        }
        let Some(donor) = donor else {
            break;
        };
        if kept(donor) <= share {
            break;
        }
        let Some(partition) = donor
            .partitions
            .iter()
            .rev()
            .copied()
            .find(|partition| group.pending_move(*partition).is_none())
        else {
            break;
        };
        group.pending.push(PendingMove { partition, to: key });
        owed -= 1;
    }
    group.pending.sort_by_key(|pending| pending.partition);
    group.generation = group.generation.wrapping_add(1);
    debug_assert!(check_assignment(group, partitions_count).is_ok());
    true
}

/// Hands the pending `partitions` to the members they were promised to;
/// partitions without a pending hand-off are ignored. True when anything
/// moved (the generation is bumped then).
pub fn complete_moves(
    group: &mut ConsumerGroup,
    partitions: &[u32],
    partitions_count: usize,
) -> bool {
    let mut moved = false;
    for partition in partitions {
        let Some(slot) = group
            .pending
            .iter()
            .position(|pending| pending.partition == *partition)
        else {
            continue;
        };
        let pending = group.pending.remove(slot);
        for member in &mut group.members {
            member
                .partitions
                .retain(|owned| *owned != pending.partition);
        }
        if let Some(member) = group
            .members
            .iter_mut()
            .find(|member| member.key == pending.to)
        {
            let at = member
                .partitions
                .partition_point(|owned| *owned < pending.partition);
            member.partitions.insert(at, pending.partition);
        }
        moved = true;
    }
    if moved {
        group.generation = group.generation.wrapping_add(1);
    }
    debug_assert!(check_assignment(group, partitions_count).is_ok());
    moved
}

/// The pending hand-offs among `partitions` (a no-op check).
pub fn any_pending(group: &ConsumerGroup, partitions: &[u32]) -> bool {
    partitions
        .iter()
        .any(|partition| group.pending_move(*partition).is_some())
}

/// The partitions pending a hand-off to `to`.
pub fn pending_to(group: &ConsumerGroup, to: MemberKey) -> impl Iterator<Item = u32> + '_ {
    group
        .pending
        .iter()
        .filter(move |pending| pending.to == to)
        .map(|pending| pending.partition)
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
    for pending in &group.pending {
        let owner = group
            .members
            .iter()
            .find(|member| member.partitions.contains(&pending.partition));
        if owner.is_none_or(|owner| owner.key == pending.to) || group.member(pending.to).is_none() {
            return Err(format!(
                "group {} has a pending move of partition {} that is not a hand-off",
                group.id, pending.partition
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemberKey;

    fn group() -> ConsumerGroup {
        ConsumerGroup {
            id: 0,
            name: "g".into(),
            members: Vec::new(),
            generation: 0,
            pending: Vec::new(),
        }
    }

    fn member(key: u128) -> Member {
        Member {
            key: MemberKey(key),
            partitions: Vec::new(),
        }
    }

    /// Hands over every pending partition (as owners commit or time out).
    fn settle(group: &mut ConsumerGroup, partitions: usize) {
        let pending: Vec<u32> = group
            .pending
            .iter()
            .map(|pending| pending.partition)
            .collect();
        complete_moves(group, &pending, partitions);
        assert!(group.pending.is_empty());
    }

    // Proves fairness: for every member/partition count, once the hand-offs
    // of each join are done, the loads differ by at most one and the
    // assignment covers every partition exactly once — and before they are
    // done, too, the assignment is complete (owners keep what they hand off).
    #[test]
    fn assignment_is_fair_and_complete() {
        for members in 1..=7u128 {
            for partitions in 0..=20usize {
                let mut group = group();
                for key in 0..members {
                    join(&mut group, member(key), partitions);
                    check_assignment(&group, partitions).unwrap();
                    settle(&mut group, partitions);
                }
                check_assignment(&group, partitions).unwrap();
                let loads: Vec<usize> = group.members.iter().map(|m| m.partitions.len()).collect();
                let min = loads.iter().min().unwrap();
                let max = loads.iter().max().unwrap();
                assert!(
                    max - min <= 1,
                    "{members} members, {partitions} partitions: {loads:?}"
                );
            }
        }
    }

    // Proves a join is cooperative: existing members keep every partition
    // (none moves between them), the newcomer's share is pending from the
    // members holding the most, and only completing a move hands it over.
    #[test]
    fn a_join_hands_off_only_the_newcomers_share() {
        let mut group = group();
        join(&mut group, member(1), 6);
        join(&mut group, member(2), 6);
        assert_eq!(
            group.assignment(MemberKey(1)),
            Some(&[0, 1, 2, 3, 4, 5][..])
        );
        assert_eq!(group.assignment(MemberKey(2)), Some(&[][..]));
        let pending: Vec<u32> = pending_to(&group, MemberKey(2)).collect();
        assert_eq!(pending, vec![3, 4, 5]);
        assert!(!complete_moves(&mut group, &[0], 6), "0 is not pending");
        let generation = group.generation;
        assert!(complete_moves(&mut group, &[5], 6));
        assert_eq!(group.generation, generation + 1);
        assert_eq!(group.assignment(MemberKey(1)), Some(&[0, 1, 2, 3, 4][..]));
        assert_eq!(group.assignment(MemberKey(2)), Some(&[5][..]));
        settle(&mut group, 6);
        // A third member takes one from each, the highest ids first.
        join(&mut group, member(3), 6);
        let pending: Vec<u32> = pending_to(&group, MemberKey(3)).collect();
        assert_eq!(pending, vec![2, 5]);
        // A leave reassigns at once and drops the hand-offs.
        group.members.retain(|member| member.key != MemberKey(2));
        rebalance(&mut group, 6);
        assert!(group.pending.is_empty());
        check_assignment(&group, 6).unwrap();
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
            settle(&mut first, 10);
            settle(&mut second, 10);
        }
        assert_eq!(first, second);
        assert_eq!(first.assignment(MemberKey(5)), Some(&[0, 1, 2][..]));
        assert_eq!(first.assignment(MemberKey(1)), Some(&[5, 6, 7, 8][..]));
        assert_eq!(first.assignment(MemberKey(9)), Some(&[3, 4, 9][..]));
        let generation = first.generation;
        assert!(!join(&mut first, member(1), 10));
        assert_eq!(first.generation, generation);
        assert_eq!(first.member_slot(MemberKey(9)), Some(2));
    }
}
