//! Why the node's timer is a `BTreeSet<(due, partition)>`: a comparison with a binary heap and
//! with tokio-util's `DelayQueue` on the work a node does.
//!
//! Run: `cargo bench -p delayq-engine --bench timer` (add `-- 2000000` for another size).
//!
//! Workload: N prefetched tasks due over a 5 s window in 64 partitions (N/64 tasks per
//! partition, many sharing a millisecond), inserted as a pull would, then drained in due
//! order, millisecond by millisecond, as the timer loop does. What is measured: the time to
//! insert, the time to drain, and how many entries the structure had to hold.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use delayq_engine::timer::DueTimer;
use delayq_storage::{Partition, QueueName};
use rand::{Rng, SeedableRng};

const WINDOW_MS: u64 = 5_000;
const PARTITIONS: u32 = 64;

fn workload(n: usize) -> Vec<(u64, u32)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    (0..n)
        .map(|_| {
            (
                rng.random_range(0..WINDOW_MS),
                rng.random_range(0..PARTITIONS),
            )
        })
        .collect()
}

fn bench_btree(tasks: &[(u64, u32)]) -> (Duration, Duration, usize) {
    let queue = QueueName::new("bench").expect("valid queue name");
    let partitions: Vec<Partition> = (0..PARTITIONS)
        .map(|p| Partition::new(queue.clone(), p))
        .collect();
    let timer = DueTimer::new(usize::MAX);
    let started = Instant::now();
    for (due, p) in tasks {
        timer.insert(*due, partitions[*p as usize].clone());
    }
    let inserted = started.elapsed();
    let held = timer.len();
    let started = Instant::now();
    let mut wakes = 0usize;
    for now in 0..WINDOW_MS {
        wakes += timer.pop_due(now).len();
    }
    assert!(timer.is_empty() && wakes == held);
    (inserted, started.elapsed(), held)
}

fn bench_heap(tasks: &[(u64, u32)]) -> (Duration, Duration, usize) {
    let started = Instant::now();
    let mut heap = BinaryHeap::with_capacity(tasks.len());
    for (due, p) in tasks {
        heap.push(Reverse((*due, *p)));
    }
    let inserted = started.elapsed();
    let held = heap.len();
    let started = Instant::now();
    let mut popped = 0usize;
    for now in 0..WINDOW_MS {
        while let Some(Reverse((due, _))) = heap.peek() {
            if *due > now {
                break;
            }
            heap.pop();
            popped += 1;
        }
    }
    assert_eq!(popped, held);
    (inserted, started.elapsed(), held)
}

fn bench_delay_queue(tasks: &[(u64, u32)]) -> (Duration, Duration, usize) {
    use futures::StreamExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let mut queue = tokio_util::time::DelayQueue::with_capacity(tasks.len());
        let base = tokio::time::Instant::now();
        let started = Instant::now();
        for (due, p) in tasks {
            queue.insert_at(*p, base + Duration::from_millis(*due));
        }
        let inserted = started.elapsed();
        let held = queue.len();
        let started = Instant::now();
        let mut popped = 0usize;
        // Paused time auto-advances to the next deadline: this drains in due order.
        while let Some(expired) = queue.next().await {
            std::hint::black_box(expired.into_inner());
            popped += 1;
        }
        assert_eq!(popped, held);
        (inserted, started.elapsed(), held)
    })
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(1_000_000);
    let tasks = workload(n);
    println!("{n} tasks due over {WINDOW_MS} ms in {PARTITIONS} partitions");
    println!(
        "{:<28} {:>12} {:>12} {:>14}",
        "structure", "insert", "drain", "entries held"
    );
    for (name, run) in [
        (
            "BTreeSet<(due, partition)>",
            bench_btree as fn(&[(u64, u32)]) -> _,
        ),
        ("BinaryHeap<(due, partition)>", bench_heap),
        ("tokio-util DelayQueue", bench_delay_queue),
    ] {
        let (insert, drain, held) = run(&tasks);
        println!("{name:<28} {insert:>12.2?} {drain:>12.2?} {held:>14}");
    }
}
