from typing import Literal

RecurringBodyOverlap = Literal["allow", "skip"]

RECURRING_BODY_OVERLAP_VALUES: set[RecurringBodyOverlap] = {
    "allow",
    "skip",
}


def check_recurring_body_overlap(value: str) -> RecurringBodyOverlap:
    if value in RECURRING_BODY_OVERLAP_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {RECURRING_BODY_OVERLAP_VALUES!r}")
