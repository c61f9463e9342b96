from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.cancelled_state import CancelledState, check_cancelled_state
from ..types import UNSET, Unset

T = TypeVar("T", bound="Cancelled")


@_attrs_define
class Cancelled:
    """What a cancel did: cancelled, plus state "inflight" when the handler was running (it cannot be un-run; no retry
    follows)

        Attributes:
            cancelled (bool):
            state (CancelledState | Unset):
    """

    cancelled: bool
    state: CancelledState | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        cancelled = self.cancelled

        state: str | Unset = UNSET
        if not isinstance(self.state, Unset):
            state = self.state

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "cancelled": cancelled,
            }
        )
        if state is not UNSET:
            field_dict["state"] = state

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        cancelled = d.pop("cancelled")

        _state = d.pop("state", UNSET)
        state: CancelledState | Unset
        if isinstance(_state, Unset):
            state = UNSET
        else:
            state = check_cancelled_state(_state)

        cancelled = cls(
            cancelled=cancelled,
            state=state,
        )

        cancelled.additional_properties = d
        return cancelled

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
