"""Drives a live delayq through the generated Python client (clients/python) only; run by
crates/http/tests/clients.rs as `python producer.py BASE_URL TOKEN`. Exits non-zero naming
the first step that went wrong."""

import sys
import time

from delayq_client import AuthenticatedClient, Client
from delayq_client.api.dead_letters import list_dead_letters, purge_dead_letter, retry_dead_letter
from delayq_client.api.queues import list_pending_tasks, pause_queue, resume_queue
from delayq_client.api.recurring import get_recurring, set_recurring
from delayq_client.api.tasks import cancel_task, get_task, schedule_task, schedule_tasks
from delayq_client.models import BulkTask, ErrorBody, RecurringBody, TaskBody


def check(condition, what):
    if not condition:
        sys.exit(f"python client: {what}")


def main(base, token):
    client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)

    scheduled = schedule_task.sync("orders", "o-1", client=client, body=TaskBody(in_="1h", payload='{"order":1}'))
    check(scheduled.id == "o-1" and scheduled.queue == "orders", f"schedule: {scheduled}")
    task = get_task.sync("orders", "o-1", client=client)
    check(task.state == "pending" and task.payload == '{"order":1}', f"get: {task}")
    cancelled = cancel_task.sync("orders", "o-1", client=client)
    check(cancelled.cancelled is True, f"cancel: {cancelled}")
    gone = get_task.sync_detailed("orders", "o-1", client=client)
    check(gone.status_code == 404 and isinstance(gone.parsed, ErrorBody), f"get after cancel: {gone}")

    refused = schedule_task.sync_detailed("orders", "o-2", client=client, body=TaskBody(due_ms=1_900_000_000))
    check(refused.status_code == 400 and "looks like seconds" in refused.parsed.error, f"seconds: {refused}")
    anonymous = get_task.sync_detailed("orders", "o-1", client=Client(base_url=base))
    check(anonymous.status_code == 401, f"without the token: {anonymous.status_code}")

    items = [BulkTask(id="b-1", delay_ms=3_600_000), BulkTask(id="b-2", due_ms=4_102_444_800_000, mode="earlier")]
    bulk = schedule_tasks.sync("orders", client=client, body=items)
    check(bulk.scheduled == 2 and bulk.failed == 0, f"bulk: {bulk}")
    pending = list_pending_tasks.sync("orders", client=client, limit=10)
    check([item["id"] for item in pending] == ["b-1", "b-2"], f"pending: {pending}")

    paused = pause_queue.sync("orders", client=client)
    check(paused.paused is True, f"pause: {paused}")
    resumed = resume_queue.sync("orders", client=client)
    check(resumed.paused is False, f"resume: {resumed}")

    spec = RecurringBody(queue="reports", cron="0 9 * * 1", tz="Europe/Berlin")
    created = set_recurring.sync("weekly-report", client=client, body=spec)
    check(created.result == "created" and created.next_ms > 0, f"recurring set: {created}")
    schedule = get_recurring.sync("weekly-report", client=client)
    check(schedule["cron"] == "0 9 * * 1" and schedule["tz"] == "Europe/Berlin", f"recurring get: {schedule}")

    # A task whose handler fails (its id starts with "fail"; one attempt) becomes a dead letter.
    schedule_task.sync("payments", "fail-1", client=client, body=TaskBody(delay_ms=0))
    deadline = time.monotonic() + 30
    while not any(item["id"] == "fail-1" for item in list_dead_letters.sync("payments", client=client)):
        check(time.monotonic() < deadline, "fail-1 never became a dead letter")
        time.sleep(0.05)
    retried = retry_dead_letter.sync("payments", "fail-1", client=client)
    check(retried.retried == 1, f"retry: {retried}")
    deadline = time.monotonic() + 30
    while True:
        purged = purge_dead_letter.sync_detailed("payments", "fail-1", client=client)
        if purged.status_code == 200:
            check(purged.parsed.purged == 1, f"purge: {purged.parsed}")
            break
        check(purged.status_code == 404 and time.monotonic() < deadline, f"purge: {purged}")
        time.sleep(0.05)
    print("python client: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
