from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.task_state import TaskState, check_task_state
from ..types import UNSET, Unset

T = TypeVar("T", bound="Task")


@_attrs_define
class Task:
    """A task as `delayq get --json` prints it: payload when it is UTF-8, else payload_base64

    Attributes:
        attempt (int):
        due_ms (int):
        generation (int):
        id (str):
        last_error (None | str):
        queue (str):
        state (TaskState):
        state_since_ms (int | None):
        traceparent (None | str): The W3C trace context the task was scheduled with (its fire's span links to it); null
            when it was scheduled without one, once it completed, or when it was cancelled while running Example:
            00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.
        payload (str | Unset): The payload, when it is UTF-8
        payload_base64 (str | Unset): The payload in standard base64, when it is not UTF-8
    """

    attempt: int
    due_ms: int
    generation: int
    id: str
    last_error: None | str
    queue: str
    state: TaskState
    state_since_ms: int | None
    traceparent: None | str
    payload: str | Unset = UNSET
    payload_base64: str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        attempt = self.attempt

        due_ms = self.due_ms

        generation = self.generation

        id = self.id

        last_error: None | str
        last_error = self.last_error

        queue = self.queue

        state: str = self.state

        state_since_ms: int | None
        state_since_ms = self.state_since_ms

        traceparent: None | str
        traceparent = self.traceparent

        payload = self.payload

        payload_base64 = self.payload_base64

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "attempt": attempt,
                "due_ms": due_ms,
                "generation": generation,
                "id": id,
                "last_error": last_error,
                "queue": queue,
                "state": state,
                "state_since_ms": state_since_ms,
                "traceparent": traceparent,
            }
        )
        if payload is not UNSET:
            field_dict["payload"] = payload
        if payload_base64 is not UNSET:
            field_dict["payload_base64"] = payload_base64

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        attempt = d.pop("attempt")

        due_ms = d.pop("due_ms")

        generation = d.pop("generation")

        id = d.pop("id")

        def _parse_last_error(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        last_error = _parse_last_error(d.pop("last_error"))

        queue = d.pop("queue")

        state = check_task_state(d.pop("state"))

        def _parse_state_since_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        state_since_ms = _parse_state_since_ms(d.pop("state_since_ms"))

        def _parse_traceparent(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        traceparent = _parse_traceparent(d.pop("traceparent"))

        payload = d.pop("payload", UNSET)

        payload_base64 = d.pop("payload_base64", UNSET)

        task = cls(
            attempt=attempt,
            due_ms=due_ms,
            generation=generation,
            id=id,
            last_error=last_error,
            queue=queue,
            state=state,
            state_since_ms=state_since_ms,
            traceparent=traceparent,
            payload=payload,
            payload_base64=payload_base64,
        )

        task.additional_properties = d
        return task

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
