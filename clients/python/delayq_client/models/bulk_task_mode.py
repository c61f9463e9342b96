from typing import Literal

BulkTaskMode = Literal["earlier", "if_absent", "later", "replace"]

BULK_TASK_MODE_VALUES: set[BulkTaskMode] = {
    "earlier",
    "if_absent",
    "later",
    "replace",
}


def check_bulk_task_mode(value: str) -> BulkTaskMode:
    if value in BULK_TASK_MODE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {BULK_TASK_MODE_VALUES!r}")
