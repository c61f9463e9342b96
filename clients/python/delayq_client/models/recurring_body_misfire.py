from typing import Literal

RecurringBodyMisfire = Literal["all", "once", "skip"]

RECURRING_BODY_MISFIRE_VALUES: set[RecurringBodyMisfire] = {
    "all",
    "once",
    "skip",
}


def check_recurring_body_misfire(value: str) -> RecurringBodyMisfire:
    if value in RECURRING_BODY_MISFIRE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {RECURRING_BODY_MISFIRE_VALUES!r}")
