from typing import Literal

CancelledState = Literal["inflight"]

CANCELLED_STATE_VALUES: set[CancelledState] = {
    "inflight",
}


def check_cancelled_state(value: str) -> CancelledState:
    if value in CANCELLED_STATE_VALUES:
        return value
    raise TypeError(f"Unexpected value {value!r}. Expected one of {CANCELLED_STATE_VALUES!r}")
