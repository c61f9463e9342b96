//! What the demo prints: one line per firing as it happens, and the summary at the end.

use super::*;

/// Prints lines stamped with the time since the demo started.
#[derive(Clone)]
pub(super) struct Printer {
    pub(super) lines: bool,
    pub(super) firings: bool,
    pub(super) start: Instant,
}

impl Printer {
    pub(super) fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub(super) fn line(&self, text: String) {
        if self.lines {
            let elapsed = self.start.elapsed().as_secs_f64();
            // A closed stdout (`delayq demo | head`) must not stop the demo.
            let _ = writeln!(std::io::stdout().lock(), "{elapsed:>7.3}s  {text}");
        }
    }

    pub(super) fn event(&self, text: String) {
        self.line(format!("== {text}"));
    }
}

/// One delivery of a task.
pub(super) struct Firing {
    pub(super) id: String,
    pub(super) node: String,
    pub(super) lateness_ms: u64,
}

/// Everything the handlers saw, shared by the nodes.
#[derive(Default)]
pub(super) struct Record {
    /// Node id -> name.
    pub(super) names: Mutex<HashMap<String, String>>,
    pub(super) firings: Mutex<Vec<Firing>>,
    /// Task id -> name of the node running it (left behind by a killed node).
    pub(super) running: Mutex<HashMap<String, String>>,
    /// The tasks that were running on the node when it was killed.
    pub(super) killed: Mutex<HashSet<String>>,
}

impl Record {
    pub(super) fn name_of(&self, node_id: &str) -> String {
        lock(&self.names)
            .get(node_id)
            .cloned()
            .unwrap_or_else(|| node_id.to_owned())
    }

    /// Records a delivery; returns whether the task had fired before.
    pub(super) fn fired(&self, task: &Task, node: &str) -> bool {
        lock(&self.running).insert(task.id.clone(), node.to_owned());
        let mut firings = lock(&self.firings);
        let again = firings.iter().any(|firing| firing.id == task.id);
        firings.push(Firing {
            id: task.id.clone(),
            node: node.to_owned(),
            lateness_ms: task.fired_ms.saturating_sub(task.due_ms),
        });
        again
    }

    pub(super) fn all_fired(&self, ids: &[String]) -> bool {
        let firings = lock(&self.firings);
        let fired: HashSet<&str> = firings.iter().map(|firing| firing.id.as_str()).collect();
        ids.iter().all(|id| fired.contains(id.as_str()))
    }

    pub(super) fn summary(
        &self,
        args: &DemoArgs,
        ids: &[String],
        killed: Option<Killed>,
        elapsed: Duration,
    ) -> Summary {
        let firings = lock(&self.firings);
        let mut lateness = histogram();
        let mut seen: HashMap<&str, u32> = HashMap::new();
        let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
        for firing in firings.iter() {
            let count = seen.entry(firing.id.as_str()).or_default();
            *count += 1;
            if *count == 1 {
                lateness.saturating_record(firing.lateness_ms);
            }
            *per_node.entry(firing.node.clone()).or_default() += 1;
        }
        let in_flight_at_kill = lock(&self.killed).clone();
        let repeated: Vec<&str> = seen
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|(id, _)| *id)
            .collect();
        let unexpected = repeated
            .iter()
            .filter(|id| !in_flight_at_kill.contains(**id))
            .count();
        let late_over_100ms = firings
            .iter()
            .filter(|firing| firing.lateness_ms > 100)
            .map(|firing| firing.id.as_str())
            .collect::<HashSet<_>>()
            .len();
        let fired = ids
            .iter()
            .filter(|id| seen.contains_key(id.as_str()))
            .count() as u64;
        Summary {
            backend: if args.on_redis { "redis" } else { "memory" },
            nodes: args.nodes,
            tasks: ids.len() as u64,
            fired,
            lost: ids.len() as u64 - fired,
            deliveries: firings.len() as u64,
            duplicates: repeated.len() as u64,
            duplicates_not_in_flight_at_kill: unexpected as u64,
            lateness_ms: Lateness {
                p50: lateness.value_at_quantile(0.5),
                p99: lateness.value_at_quantile(0.99),
                max: lateness.max(),
            },
            late_over_100ms: late_over_100ms as u64,
            per_node,
            killed: killed.map(|killed| KilledSummary {
                node: killed.name,
                at_ms: killed.at_ms,
                partitions: killed.partitions,
                in_flight: killed.in_flight,
                partitions_taken_over_after_ms: killed.taken_over_after_ms,
            }),
            elapsed_ms: elapsed.as_millis() as u64,
        }
    }
}

/// The demo's result, as printed (and with `--json`, as JSON).
#[derive(Serialize)]
pub(super) struct Summary {
    pub(super) backend: &'static str,
    pub(super) nodes: u32,
    pub(super) tasks: u64,
    pub(super) fired: u64,
    pub(super) lost: u64,
    pub(super) deliveries: u64,
    pub(super) duplicates: u64,
    pub(super) duplicates_not_in_flight_at_kill: u64,
    pub(super) lateness_ms: Lateness,
    pub(super) late_over_100ms: u64,
    pub(super) per_node: BTreeMap<String, u64>,
    pub(super) killed: Option<KilledSummary>,
    pub(super) elapsed_ms: u64,
}

#[derive(Serialize)]
pub(super) struct Lateness {
    pub(super) p50: u64,
    pub(super) p99: u64,
    pub(super) max: u64,
}

#[derive(Serialize)]
pub(super) struct KilledSummary {
    pub(super) node: String,
    pub(super) at_ms: u64,
    pub(super) partitions: Vec<u32>,
    pub(super) in_flight: Vec<String>,
    pub(super) partitions_taken_over_after_ms: Option<u64>,
}

impl Summary {
    pub(super) fn print(&self, backend: &str) {
        println!();
        println!(
            "Summary: {} nodes on {backend}, {:.1} s",
            self.nodes,
            self.elapsed_ms as f64 / 1000.0
        );
        println!("  tasks scheduled   {}", self.tasks);
        println!("  fired             {} (lost: {})", self.fired, self.lost);
        println!(
            "  deliveries        {} ({} duplicates, {} of them for tasks not running at the kill)",
            self.deliveries, self.duplicates, self.duplicates_not_in_flight_at_kill
        );
        println!(
            "  lateness          p50 {} ms, p99 {} ms, max {} ms (first deliveries)",
            self.lateness_ms.p50, self.lateness_ms.p99, self.lateness_ms.max
        );
        println!(
            "  late by > 100 ms  {} (due while their partition had no live owner)",
            self.late_over_100ms
        );
        let per_node: Vec<String> = self
            .per_node
            .iter()
            .map(|(node, count)| format!("{node} {count}"))
            .collect();
        println!("  fired per node    {}", per_node.join(", "));
        if let Some(killed) = &self.killed {
            let takeover = killed
                .partitions_taken_over_after_ms
                .map_or("not yet".to_owned(), |ms| format!("{ms} ms after the kill"));
            println!(
                "  killed            {} at {:.1} s: its partitions {:?} moved {takeover}; \
                 the {} tasks it was running fired again elsewhere",
                killed.node,
                killed.at_ms as f64 / 1000.0,
                killed.partitions,
                killed.in_flight.len()
            );
        }
        println!(
            "Delivery is at-least-once: a task running on a node that dies runs again elsewhere \
             (handlers use queue/id/generation as an idempotency key)."
        );
    }
}
