from typing import Literal

RecurringSetResult = Literal["created", "unchanged", "updated"]

RECURRING_SET_RESULT_VALUES: set[RecurringSetResult] = {
    "created",
    "unchanged",
    "updated",
}


def check_recurring_set_result(value: str) -> RecurringSetResult:
    if value in RECURRING_SET_RESULT_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {RECURRING_SET_RESULT_VALUES!r}")
