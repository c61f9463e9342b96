from typing import Literal

TaskBodyMode = Literal["earlier", "if_absent", "later", "replace"]

TASK_BODY_MODE_VALUES: set[TaskBodyMode] = {
    "earlier",
    "if_absent",
    "later",
    "replace",
}


def check_task_body_mode(value: str) -> TaskBodyMode:
    if value in TASK_BODY_MODE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {TASK_BODY_MODE_VALUES!r}")
