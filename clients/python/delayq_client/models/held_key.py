from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="HeldKey")


@_attrs_define
class HeldKey:
    """A flow key holding tasks back, as `delayq keys --json` lists it

    Attributes:
        key (str): The flow key: the part of the ids between the first { and the next }
        longest_wait_ms (int): How long that task has waited, on the cluster clock
        oldest_due_ms (int): The earliest due among the waiting tasks
        queue (str):
        running (int): Tasks of the key holding a slot (running, or with FIFO order waiting for a retry)
        waiting (int): Tasks of the key held back: due, waiting for a slot or for the key's rate
    """

    key: str
    longest_wait_ms: int
    oldest_due_ms: int
    queue: str
    running: int
    waiting: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        key = self.key

        longest_wait_ms = self.longest_wait_ms

        oldest_due_ms = self.oldest_due_ms

        queue = self.queue

        running = self.running

        waiting = self.waiting

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "key": key,
                "longest_wait_ms": longest_wait_ms,
                "oldest_due_ms": oldest_due_ms,
                "queue": queue,
                "running": running,
                "waiting": waiting,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        key = d.pop("key")

        longest_wait_ms = d.pop("longest_wait_ms")

        oldest_due_ms = d.pop("oldest_due_ms")

        queue = d.pop("queue")

        running = d.pop("running")

        waiting = d.pop("waiting")

        held_key = cls(
            key=key,
            longest_wait_ms=longest_wait_ms,
            oldest_due_ms=oldest_due_ms,
            queue=queue,
            running=running,
            waiting=waiting,
        )

        held_key.additional_properties = d
        return held_key

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
