from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.recurring_set_result import RecurringSetResult, check_recurring_set_result

T = TypeVar("T", bound="RecurringSet")


@_attrs_define
class RecurringSet:
    """What a recurring upsert did

    Attributes:
        name (str):
        next_ms (int | None):
        queue (str):
        result (RecurringSetResult):
    """

    name: str
    next_ms: int | None
    queue: str
    result: RecurringSetResult
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        name = self.name

        next_ms: int | None
        next_ms = self.next_ms

        queue = self.queue

        result: str = self.result

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "name": name,
                "next_ms": next_ms,
                "queue": queue,
                "result": result,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        name = d.pop("name")

        def _parse_next_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        next_ms = _parse_next_ms(d.pop("next_ms"))

        queue = d.pop("queue")

        result = check_recurring_set_result(d.pop("result"))

        recurring_set = cls(
            name=name,
            next_ms=next_ms,
            queue=queue,
            result=result,
        )

        recurring_set.additional_properties = d
        return recurring_set

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
