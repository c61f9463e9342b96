// Drives a live delayq through the generated TypeScript client (clients/typescript) only;
// compiled and run by crates/http/tests/clients.rs as `node producer.js BASE_URL TOKEN`.
// Exits non-zero naming the first step that went wrong.

import {
  cancelTask,
  getRecurring,
  getTask,
  listDeadLetters,
  listPendingTasks,
  pauseQueue,
  purgeDeadLetter,
  resumeQueue,
  retryDeadLetter,
  scheduleTask,
  scheduleTasks,
  setRecurring,
} from './client';
import { createClient } from './client/client';

declare const process: { argv: string[]; exit(code: number): never };

function check(condition: boolean, what: string): void {
  if (!condition) {
    console.error(`typescript client: ${what}`);
    process.exit(1);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function main(baseUrl: string, token: string): Promise<void> {
  const client = createClient({ baseUrl, auth: token });

  const scheduled = await scheduleTask({ client, path: { queue: 'orders', id: 'o-1' }, body: { in: '1h', payload: '{"order":1}' } });
  check(scheduled.response.status === 200 && scheduled.data?.id === 'o-1', `schedule: ${JSON.stringify(scheduled.data)}`);
  const task = await getTask({ client, path: { queue: 'orders', id: 'o-1' } });
  check(task.data?.state === 'pending' && task.data?.payload === '{"order":1}', `get: ${JSON.stringify(task.data)}`);
  const cancelled = await cancelTask({ client, path: { queue: 'orders', id: 'o-1' } });
  check(cancelled.data?.cancelled === true, `cancel: ${JSON.stringify(cancelled.data)}`);
  const gone = await getTask({ client, path: { queue: 'orders', id: 'o-1' } });
  check(gone.response.status === 404 && typeof gone.error?.error === 'string', `get after cancel: ${gone.response.status}`);

  const refused = await scheduleTask({ client, path: { queue: 'orders', id: 'o-2' }, body: { due_ms: 1_900_000_000 } });
  check(refused.response.status === 400 && (refused.error?.error ?? '').includes('looks like seconds'), `seconds: ${JSON.stringify(refused.error)}`);
  const anonymous = await getTask({ client: createClient({ baseUrl }), path: { queue: 'orders', id: 'o-1' } });
  check(anonymous.response.status === 401, `without the token: ${anonymous.response.status}`);

  const bulk = await scheduleTasks({
    client,
    path: { queue: 'orders' },
    body: [
      { id: 'b-1', delay_ms: 3_600_000 },
      { id: 'b-2', due_ms: 4_102_444_800_000, mode: 'earlier' },
    ],
  });
  check(bulk.data?.scheduled === 2 && bulk.data?.failed === 0, `bulk: ${JSON.stringify(bulk.data)}`);
  const pending = await listPendingTasks({ client, path: { queue: 'orders' }, query: { limit: 10 } });
  check(JSON.stringify((pending.data ?? []).map((item) => item.id)) === '["b-1","b-2"]', `pending: ${JSON.stringify(pending.data)}`);

  const paused = await pauseQueue({ client, path: { queue: 'orders' } });
  check(paused.data?.paused === true, `pause: ${JSON.stringify(paused.data)}`);
  const resumed = await resumeQueue({ client, path: { queue: 'orders' } });
  check(resumed.data?.paused === false, `resume: ${JSON.stringify(resumed.data)}`);

  const created = await setRecurring({
    client,
    path: { name: 'weekly-report' },
    body: { queue: 'reports', cron: '0 9 * * 1', tz: 'Europe/Berlin' },
  });
  check(created.data?.result === 'created', `recurring set: ${JSON.stringify(created.data)}`);
  const schedule = await getRecurring({ client, path: { name: 'weekly-report' } });
  check(schedule.data?.cron === '0 9 * * 1' && schedule.data?.tz === 'Europe/Berlin', `recurring get: ${JSON.stringify(schedule.data)}`);

  // A task whose handler fails (its id starts with "fail"; one attempt) becomes a dead letter.
  await scheduleTask({ client, path: { queue: 'payments', id: 'fail-1' }, body: { delay_ms: 0 } });
  let deadline = Date.now() + 30_000;
  for (;;) {
    const dead = await listDeadLetters({ client, path: { queue: 'payments' } });
    if ((dead.data ?? []).some((item) => item.id === 'fail-1')) break;
    check(Date.now() < deadline, 'fail-1 never became a dead letter');
    await sleep(50);
  }
  const retried = await retryDeadLetter({ client, path: { queue: 'payments', id: 'fail-1' } });
  check(retried.data?.retried === 1, `retry: ${JSON.stringify(retried.data)}`);
  deadline = Date.now() + 30_000;
  for (;;) {
    const purged = await purgeDeadLetter({ client, path: { queue: 'payments', id: 'fail-1' } });
    if (purged.response.status === 200) {
      check(purged.data?.purged === 1, `purge: ${JSON.stringify(purged.data)}`);
      break;
    }
    check(purged.response.status === 404 && Date.now() < deadline, `purge: ${purged.response.status}`);
    await sleep(50);
  }
  console.log('typescript client: ok');
}

main(process.argv[2], process.argv[3]).catch((error) => {
  console.error(`typescript client: ${error}`);
  process.exit(1);
});
