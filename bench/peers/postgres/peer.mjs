// Part of BENCHMARKS.md (issue 25): the peers side of bench/peers/postgres/run.sh.
//   node peer.mjs setup PEER URL QUEUES          install the peer's schema, create the queues
//   node peer.mjs work PEER CONFIG URL QUEUES OUT  one worker process: every handler start is
//                                                 appended to OUT as {"queue","id","due_ms","fired_ms"}
//   node peer.mjs load PEER URL QUEUE FILE       create the jobs of FILE (JSON lines {"id","due_ms"},
//                                                 "queue" to name another queue than QUEUE), each to
//                                                 start at its due_ms (startAfter / runAt)
// PEER: pgboss | graphile. QUEUES: comma-separated queue names (pg-boss queues, Graphile task
// identifiers). CONFIG: see CONFIGS below.
import fs from "node:fs";
import readline from "node:readline";

const CONFIGS = {
  // pg-boss: work(queue, handler) with nothing else (batchSize 1, localConcurrency 1, 2 s poll).
  "pgboss-default": { peer: "pgboss", work: {} },
  // pg-boss: the brief's 0.5 s poll, otherwise the defaults.
  "pgboss-poll0.5": { peer: "pgboss", work: { pollingIntervalSeconds: 0.5 } },
  // pg-boss batched: 100 jobs a fetch, fetch again at once while a fetch comes back full, 0.5 s poll.
  "pgboss-batch100": { peer: "pgboss", work: { pollingIntervalSeconds: 0.5, batchSize: 100, burstWhenBatchFull: true } },
  // Graphile Worker: run({connectionString, taskList}) (concurrentJobs 1, pollInterval 2 s).
  "graphile-default": { peer: "graphile", worker: {} },
  // Graphile Worker batched (its performance docs' batching settings): the pool fetches and locks
  // 500 jobs at a time (localQueue.size), completions are batched (completeJobBatchDelay 0,
  // failJobBatchDelay 0), 10 jobs at once per process.
  "graphile-batched": { peer: "graphile", worker: { concurrentJobs: 10, localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
};

const [mode, ...args] = process.argv.slice(2);

async function pgboss(url) {
  const { PgBoss } = await import("pg-boss");
  return PgBoss;
}

async function graphile() {
  return await import("graphile-worker");
}

function logger(out) {
  const stream = fs.createWriteStream(out, { flags: "a" });
  return (queue, data) => {
    stream.write(JSON.stringify({ queue, id: data.id, due_ms: data.due_ms, fired_ms: Date.now() }) + "\n");
  };
}

async function readJobs(file) {
  const jobs = [];
  const rl = readline.createInterface({ input: fs.createReadStream(file) });
  for await (const line of rl) if (line.trim()) jobs.push(JSON.parse(line));
  return jobs;
}

if (mode === "setup") {
  const [peer, url, queues] = args;
  if (peer === "pgboss") {
    const PgBoss = await pgboss();
    const boss = new PgBoss({ connectionString: url, supervise: false, schedule: false });
    boss.on("error", (e) => console.error(e));
    await boss.start();
    for (const q of queues.split(",")) await boss.createQueue(q);
    await boss.stop({ graceful: false });
  } else {
    const { runMigrations } = await graphile();
    await runMigrations({ connectionString: url });
  }
} else if (mode === "load") {
  const [peer, url, queue, file] = args;
  const jobs = await readJobs(file);
  const CHUNK = 5000;
  if (peer === "pgboss") {
    const PgBoss = await pgboss();
    const boss = new PgBoss({ connectionString: url, supervise: false, schedule: false, migrate: false });
    boss.on("error", (e) => console.error(e));
    await boss.start();
    const byQueue = new Map();
    for (const j of jobs) {
      const q = j.queue ?? queue;
      if (!byQueue.has(q)) byQueue.set(q, []);
      byQueue.get(q).push(j);
    }
    for (const [q, list] of byQueue) {
      for (let i = 0; i < list.length; i += CHUNK) {
        await boss.insert(q, list.slice(i, i + CHUNK).map((j) => ({ data: j, startAfter: new Date(j.due_ms) })));
      }
    }
    await boss.stop({ graceful: false });
  } else {
    const { makeWorkerUtils } = await graphile();
    const utils = await makeWorkerUtils({ connectionString: url });
    for (let i = 0; i < jobs.length; i += CHUNK) {
      await utils.addJobs(jobs.slice(i, i + CHUNK).map((j) => ({ identifier: j.queue ?? queue, payload: j, runAt: new Date(j.due_ms) })));
    }
    await utils.release();
  }
} else if (mode === "work") {
  const [peer, config, url, queues, out] = args;
  const c = CONFIGS[config];
  if (!c || c.peer !== peer) throw new Error(`unknown config ${config} for ${peer}`);
  const log = logger(out);
  if (peer === "pgboss") {
    const PgBoss = await pgboss();
    const boss = new PgBoss({ connectionString: url });
    boss.on("error", (e) => console.error(e));
    await boss.start();
    for (const q of queues.split(",")) {
      await boss.work(q, c.work, async (batch) => {
        for (const job of batch) log(q, job.data);
      });
    }
  } else {
    const { run } = await graphile();
    const taskList = {};
    for (const q of queues.split(",")) taskList[q] = async (payload) => log(q, payload);
    await run({ connectionString: url, taskList, noHandleSignals: true, preset: { worker: c.worker } });
  }
  process.on("SIGTERM", () => process.exit(0));
} else {
  console.error("usage: peer.mjs setup|work|load ...");
  process.exit(2);
}
