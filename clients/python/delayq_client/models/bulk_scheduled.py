from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.bulk_scheduled_errors_item import BulkScheduledErrorsItem


T = TypeVar("T", bound="BulkScheduled")


@_attrs_define
class BulkScheduled:
    """What a bulk schedule did, as `delayq schedule --from` prints it, plus the items the store refused

    Attributes:
        duplicates (int):
        errors (list[BulkScheduledErrorsItem]): The first 100 failed items
        errors_truncated (bool):
        failed (int):
        kept (int):
        replaced (int):
        scheduled (int):
    """

    duplicates: int
    errors: list[BulkScheduledErrorsItem]
    errors_truncated: bool
    failed: int
    kept: int
    replaced: int
    scheduled: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        duplicates = self.duplicates

        errors = []
        for errors_item_data in self.errors:
            errors_item = errors_item_data.to_dict()
            errors.append(errors_item)

        errors_truncated = self.errors_truncated

        failed = self.failed

        kept = self.kept

        replaced = self.replaced

        scheduled = self.scheduled

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "duplicates": duplicates,
                "errors": errors,
                "errors_truncated": errors_truncated,
                "failed": failed,
                "kept": kept,
                "replaced": replaced,
                "scheduled": scheduled,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.bulk_scheduled_errors_item import BulkScheduledErrorsItem  # noqa: PLC0415

        d = dict(src_dict)
        duplicates = d.pop("duplicates")

        errors = []
        _errors = d.pop("errors")
        for errors_item_data in _errors:
            errors_item = BulkScheduledErrorsItem.from_dict(errors_item_data)

            errors.append(errors_item)

        errors_truncated = d.pop("errors_truncated")

        failed = d.pop("failed")

        kept = d.pop("kept")

        replaced = d.pop("replaced")

        scheduled = d.pop("scheduled")

        bulk_scheduled = cls(
            duplicates=duplicates,
            errors=errors,
            errors_truncated=errors_truncated,
            failed=failed,
            kept=kept,
            replaced=replaced,
            scheduled=scheduled,
        )

        bulk_scheduled.additional_properties = d
        return bulk_scheduled

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
