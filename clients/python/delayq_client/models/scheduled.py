from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

T = TypeVar("T", bound="Scheduled")


@_attrs_define
class Scheduled:
    """What a schedule did, as `delayq schedule --json` prints it

    Attributes:
        due_ms (int):
        duplicate (bool): The same id and due already fired within executed_retention: nothing was scheduled
        id (str):
        kept (bool): The mode kept the live task that was there; due_ms is its due
        queue (str):
        replaced (bool): A live task with this id was replaced
    """

    due_ms: int
    duplicate: bool
    id: str
    kept: bool
    queue: str
    replaced: bool
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        due_ms = self.due_ms

        duplicate = self.duplicate

        id = self.id

        kept = self.kept

        queue = self.queue

        replaced = self.replaced

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "due_ms": due_ms,
                "duplicate": duplicate,
                "id": id,
                "kept": kept,
                "queue": queue,
                "replaced": replaced,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        due_ms = d.pop("due_ms")

        duplicate = d.pop("duplicate")

        id = d.pop("id")

        kept = d.pop("kept")

        queue = d.pop("queue")

        replaced = d.pop("replaced")

        scheduled = cls(
            due_ms=due_ms,
            duplicate=duplicate,
            id=id,
            kept=kept,
            queue=queue,
            replaced=replaced,
        )

        scheduled.additional_properties = d
        return scheduled

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
