//! Partition assignment: pinned, balanced, minimal movement, queue filters.

use std::collections::HashMap;

use delayq_coordinator::{owned_partitions, owner, Member, NodeId, QueueFilter};

fn member(id: &str) -> Member {
    Member {
        id: NodeId::from_string(id),
        queues: QueueFilter::All,
    }
}

/// `count` fixed uuid-shaped ids, sorted (as a membership is).
fn members(count: usize) -> Vec<Member> {
    (0..count)
        .map(|i| member(&format!("6d1f3c2a-0000-4000-8000-{i:012}")))
        .collect()
}

const QUEUES: [&str; 8] = [
    "order-timeout",
    "device-offline",
    "reminders",
    "webhook-retry",
    "a",
    "b.c",
    "q_7",
    "Z-9",
];

/// Owner of every `(queue, partition)` for 8 queues x 64 partitions.
fn assignment(members: &[Member]) -> HashMap<(String, u32), NodeId> {
    let mut owners = HashMap::new();
    for queue in QUEUES {
        for partition in 0..64 {
            let owner = owner(queue, partition, members).expect("someone serves every queue");
            owners.insert((queue.to_owned(), partition), owner.clone());
        }
    }
    owners
}

#[test]
fn owners_are_pinned_across_processes_and_releases() {
    let members: Vec<Member> = ["node-a", "node-b", "node-c"].map(member).to_vec();
    let cases = [
        ("orders", 0, "node-b"),
        ("orders", 1, "node-b"),
        ("orders", 2, "node-c"),
        ("orders", 63, "node-b"),
        ("device-offline", 0, "node-a"),
        ("device-offline", 5, "node-c"),
        ("reminders", 17, "node-a"),
    ];
    for (queue, partition, expected) in cases {
        assert_eq!(
            owner(queue, partition, &members).map(NodeId::as_str),
            Some(expected),
            "{queue}/{partition}"
        );
    }
    // The order of the member list does not matter.
    let reversed: Vec<Member> = members.iter().rev().cloned().collect();
    for queue in QUEUES {
        for partition in 0..64 {
            assert_eq!(
                owner(queue, partition, &members),
                owner(queue, partition, &reversed)
            );
        }
    }
}

#[test]
fn no_node_owns_more_than_one_and_a_half_fair_shares() {
    let members = members(5);
    let fair = 512.0 / 5.0;
    let mut total = 0;
    for node in &members {
        let owned = owned_partitions(&node.id, "order-timeout", 512, &members).len();
        assert!(
            (owned as f64) <= 1.5 * fair,
            "{} owns {owned} of 512 (fair share {fair})",
            node.id
        );
        assert!(owned > 0);
        total += owned;
    }
    assert_eq!(total, 512, "every partition has exactly one owner");
}

#[test]
fn a_sixth_node_takes_about_a_sixth_and_nothing_else_moves() {
    let five = members(5);
    let mut six = members(6);
    let newcomer = six[5].id.clone();
    six.sort_by(|a, b| a.id.cmp(&b.id));
    let before = assignment(&five);
    let after = assignment(&six);
    let mut moved = 0;
    for (slot, old) in &before {
        let new = &after[slot];
        if new != old {
            assert_eq!(new, &newcomer, "{slot:?} moved between two old nodes");
            moved += 1;
        }
    }
    // 512 / 6 = 85 expected.
    assert!((50..=128).contains(&moved), "{moved} of 512 moved");

    // And back: when the sixth leaves, exactly its partitions move, back where they were.
    let back = assignment(&five);
    assert_eq!(back, before);
    let owned_by_newcomer = after.values().filter(|n| **n == newcomer).count();
    assert_eq!(owned_by_newcomer, moved);
}

#[test]
fn a_leaving_node_hands_over_only_its_own_partitions() {
    let five = members(5);
    let leaver = five[2].id.clone();
    let four: Vec<Member> = five.iter().filter(|m| m.id != leaver).cloned().collect();
    let before = assignment(&five);
    let after = assignment(&four);
    for (slot, old) in &before {
        if old != &leaver {
            assert_eq!(
                &after[slot], old,
                "{slot:?} moved although its owner stayed"
            );
        }
    }
}

#[test]
fn queue_filters_are_respected() {
    let members = vec![
        Member {
            id: NodeId::from_string("orders-only"),
            queues: QueueFilter::only(["order-timeout"]),
        },
        Member {
            id: NodeId::from_string("devices-only"),
            queues: QueueFilter::only(["device-offline", "device-offline"]),
        },
        member("everything"),
    ];
    for partition in 0..64 {
        let orders = owner("order-timeout", partition, &members).expect("owner");
        assert_ne!(orders.as_str(), "devices-only");
        let devices = owner("device-offline", partition, &members).expect("owner");
        assert_ne!(devices.as_str(), "orders-only");
        let other = owner("reminders", partition, &members).expect("owner");
        assert_eq!(other.as_str(), "everything");
    }
    let nobody = vec![members[0].clone()];
    assert_eq!(owner("reminders", 0, &nobody), None);
    assert!(owned_partitions(&members[0].id, "reminders", 64, &nobody).is_empty());
    assert_eq!(
        QueueFilter::only(["b", "a", "b"]),
        QueueFilter::Only(vec!["a".to_owned(), "b".to_owned()])
    );
}
