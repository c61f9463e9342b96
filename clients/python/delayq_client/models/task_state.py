from typing import Literal

TaskState = Literal["dead", "done", "inflight", "pending"]

TASK_STATE_VALUES: set[TaskState] = {
    "dead",
    "done",
    "inflight",
    "pending",
}


def check_task_state(value: str) -> TaskState:
    if value in TASK_STATE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {TASK_STATE_VALUES!r}")
