from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.recurring_body_misfire import RecurringBodyMisfire, check_recurring_body_misfire
from ..models.recurring_body_overlap import RecurringBodyOverlap, check_recurring_body_overlap
from ..models.time_zone import TimeZone, check_time_zone
from ..types import UNSET, Unset

T = TypeVar("T", bound="RecurringBody")


@_attrs_define
class RecurringBody:
    """The spec, as the flags of `delayq recurring set`: a queue and exactly one of cron (with an optional tz) and every. A
    field is given with its value or left out (null is refused). end_at, when given with start_at, must be after it.

        Example:
            {'cron': '0 9 * * 1', 'queue': 'reports', 'tz': 'Europe/Berlin'}

        Attributes:
            queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
            cron (str | Unset): Five fields: minute hour day-of-month month day-of-week, each *, a number or (minute, hour)
                */N; the server also takes lists, ranges and names Example: 0 9 * * 1.
            end_at (int | str | Unset): No tick after this time; after start_at Example: 2031-01-01T00:00:00Z.
            every (str | Unset): A duration of at least 1 s, like "5m" or "1h 30m" Example: 5m.
            max_catchup (int | str | Unset): 1..=10000 (default 100), a number or text
            misfire (RecurringBodyMisfire | Unset): Ticks missed beyond misfire_grace: skip them, fire the latest once (the
                default), or all (at most max_catchup)
            misfire_grace (str | Unset): How late a tick may still fire (default 1m)
            overlap (RecurringBodyOverlap | Unset): allow (default), or skip a tick while the previous one is pending or in
                flight
            payload (str | Unset): The payload of every tick
            start_at (int | str | Unset): No tick before this time Example: 2030-01-01T00:00:00Z.
            tz (TimeZone | Unset): An IANA time zone of cron (default UTC) Example: Europe/Berlin.
    """

    queue: str
    cron: str | Unset = UNSET
    end_at: int | str | Unset = UNSET
    every: str | Unset = UNSET
    max_catchup: int | str | Unset = UNSET
    misfire: RecurringBodyMisfire | Unset = UNSET
    misfire_grace: str | Unset = UNSET
    overlap: RecurringBodyOverlap | Unset = UNSET
    payload: str | Unset = UNSET
    start_at: int | str | Unset = UNSET
    tz: TimeZone | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        queue = self.queue

        cron = self.cron

        end_at: int | str | Unset
        if isinstance(self.end_at, Unset):
            end_at = UNSET
        else:
            end_at = self.end_at

        every = self.every

        max_catchup: int | str | Unset
        if isinstance(self.max_catchup, Unset):
            max_catchup = UNSET
        else:
            max_catchup = self.max_catchup

        misfire: str | Unset = UNSET
        if not isinstance(self.misfire, Unset):
            misfire = self.misfire

        misfire_grace = self.misfire_grace

        overlap: str | Unset = UNSET
        if not isinstance(self.overlap, Unset):
            overlap = self.overlap

        payload = self.payload

        start_at: int | str | Unset
        if isinstance(self.start_at, Unset):
            start_at = UNSET
        else:
            start_at = self.start_at

        tz: str | Unset = UNSET
        if not isinstance(self.tz, Unset):
            tz = self.tz

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "queue": queue,
            }
        )
        if cron is not UNSET:
            field_dict["cron"] = cron
        if end_at is not UNSET:
            field_dict["end_at"] = end_at
        if every is not UNSET:
            field_dict["every"] = every
        if max_catchup is not UNSET:
            field_dict["max_catchup"] = max_catchup
        if misfire is not UNSET:
            field_dict["misfire"] = misfire
        if misfire_grace is not UNSET:
            field_dict["misfire_grace"] = misfire_grace
        if overlap is not UNSET:
            field_dict["overlap"] = overlap
        if payload is not UNSET:
            field_dict["payload"] = payload
        if start_at is not UNSET:
            field_dict["start_at"] = start_at
        if tz is not UNSET:
            field_dict["tz"] = tz

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        queue = d.pop("queue")

        cron = d.pop("cron", UNSET)

        def _parse_end_at(data: object) -> int | str | Unset:
            if isinstance(data, Unset):
                return data
            return cast(int | str | Unset, data)

        end_at = _parse_end_at(d.pop("end_at", UNSET))

        every = d.pop("every", UNSET)

        def _parse_max_catchup(data: object) -> int | str | Unset:
            if isinstance(data, Unset):
                return data
            return cast(int | str | Unset, data)

        max_catchup = _parse_max_catchup(d.pop("max_catchup", UNSET))

        _misfire = d.pop("misfire", UNSET)
        misfire: RecurringBodyMisfire | Unset
        if isinstance(_misfire, Unset):
            misfire = UNSET
        else:
            misfire = check_recurring_body_misfire(_misfire)

        misfire_grace = d.pop("misfire_grace", UNSET)

        _overlap = d.pop("overlap", UNSET)
        overlap: RecurringBodyOverlap | Unset
        if isinstance(_overlap, Unset):
            overlap = UNSET
        else:
            overlap = check_recurring_body_overlap(_overlap)

        payload = d.pop("payload", UNSET)

        def _parse_start_at(data: object) -> int | str | Unset:
            if isinstance(data, Unset):
                return data
            return cast(int | str | Unset, data)

        start_at = _parse_start_at(d.pop("start_at", UNSET))

        _tz = d.pop("tz", UNSET)
        tz: TimeZone | Unset
        if isinstance(_tz, Unset):
            tz = UNSET
        else:
            tz = check_time_zone(_tz)

        recurring_body = cls(
            queue=queue,
            cron=cron,
            end_at=end_at,
            every=every,
            max_catchup=max_catchup,
            misfire=misfire,
            misfire_grace=misfire_grace,
            overlap=overlap,
            payload=payload,
            start_at=start_at,
            tz=tz,
        )

        return recurring_body
