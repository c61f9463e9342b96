from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..models.task_body_mode import TaskBodyMode, check_task_body_mode
from ..types import UNSET, Unset

T = TypeVar("T", bound="TaskBody")


@_attrs_define
class TaskBody:
    """Exactly one of delay_ms, due_ms, in and at; an optional payload and mode. A field is given with its value or left
    out (null is refused). An "id" equal to the path's is tolerated.

        Example:
            {'in': '30s', 'payload': '{"order":42}'}

        Attributes:
            at (str | Unset): Fire at this time: RFC 3339 with Z or an offset, or epoch milliseconds as text (at least
                10^11) Example: 2030-01-01T09:00:00+02:00.
            delay_ms (int | Unset): Fire this many milliseconds from now (at most 10^14)
            due_ms (int | Unset): Fire at this time, in milliseconds since the Unix epoch on the cluster clock; a number
                below 10^11 looks like seconds and is refused
            in_ (str | Unset): Fire after this duration: one to four parts of a number and a unit (ms, s, m, h, d) separated
                by spaces, like "30s" or "1h 30m" (the server also takes the other humantime units) Example: 30s.
            mode (TaskBodyMode | Unset): For an id with a live task: replace (the default: the new due wins), if_absent (the
                live task stays), earlier or later (the earlier or later due wins, with its payload)
            payload (str | Unset): Handed to the handler; at most engine.max_payload bytes (else 413)
    """

    at: str | Unset = UNSET
    delay_ms: int | Unset = UNSET
    due_ms: int | Unset = UNSET
    in_: str | Unset = UNSET
    mode: TaskBodyMode | Unset = UNSET
    payload: str | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        at = self.at

        delay_ms = self.delay_ms

        due_ms = self.due_ms

        in_ = self.in_

        mode: str | Unset = UNSET
        if not isinstance(self.mode, Unset):
            mode = self.mode

        payload = self.payload

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if at is not UNSET:
            field_dict["at"] = at
        if delay_ms is not UNSET:
            field_dict["delay_ms"] = delay_ms
        if due_ms is not UNSET:
            field_dict["due_ms"] = due_ms
        if in_ is not UNSET:
            field_dict["in"] = in_
        if mode is not UNSET:
            field_dict["mode"] = mode
        if payload is not UNSET:
            field_dict["payload"] = payload

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        at = d.pop("at", UNSET)

        delay_ms = d.pop("delay_ms", UNSET)

        due_ms = d.pop("due_ms", UNSET)

        in_ = d.pop("in", UNSET)

        _mode = d.pop("mode", UNSET)
        mode: TaskBodyMode | Unset
        if isinstance(_mode, Unset):
            mode = UNSET
        else:
            mode = check_task_body_mode(_mode)

        payload = d.pop("payload", UNSET)

        task_body = cls(
            at=at,
            delay_ms=delay_ms,
            due_ms=due_ms,
            in_=in_,
            mode=mode,
            payload=payload,
        )

        return task_body
