from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.bulk_scheduled import BulkScheduled
from ...models.bulk_task import BulkTask
from ...models.error_body import ErrorBody
from ...types import UNSET, Response, Unset


def _get_kwargs(
    queue: str,
    *,
    body: list[BulkTask],
    traceparent: None | str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(traceparent, Unset):
        headers["traceparent"] = traceparent

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/queues/{queue}/tasks".format(
            queue=quote(str(queue), safe=""),
        ),
    }

    _kwargs["json"] = []
    for body_item_data in body:
        body_item = body_item_data.to_dict()
        _kwargs["json"].append(body_item)

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> BulkScheduled | ErrorBody | None:
    if response.status_code == 200:
        response_200 = BulkScheduled.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = ErrorBody.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = ErrorBody.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = ErrorBody.from_dict(response.json())

        return response_403

    if response.status_code == 413:
        response_413 = ErrorBody.from_dict(response.json())

        return response_413

    if response.status_code == 421:
        response_421 = ErrorBody.from_dict(response.json())

        return response_421

    if response.status_code == 503:
        response_503 = ErrorBody.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[BulkScheduled | ErrorBody]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    queue: str,
    *,
    client: AuthenticatedClient,
    body: list[BulkTask],
    traceparent: None | str | Unset = UNSET,
) -> Response[BulkScheduled | ErrorBody]:
    """Schedules many tasks of one queue, each in its own `"mode"`:
    `{"scheduled","replaced","duplicates","kept","failed"}` as `delayq schedule --from`
    prints, plus `"errors":[{"index","error"}]`. A body with a malformed item (what the
    document's schema refuses: an unknown field, a wrong type, a bad id, not exactly one due
    form, a bad mode) is refused whole with 400 naming the item's index, and nothing of it is
    scheduled; an item the store refuses (a payload over `max_payload`) fails alone.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        traceparent (None | str | Unset):
        body (list[BulkTask]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BulkScheduled | ErrorBody]
    """

    kwargs = _get_kwargs(
        queue=queue,
        body=body,
        traceparent=traceparent,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    queue: str,
    *,
    client: AuthenticatedClient,
    body: list[BulkTask],
    traceparent: None | str | Unset = UNSET,
) -> BulkScheduled | ErrorBody | None:
    """Schedules many tasks of one queue, each in its own `"mode"`:
    `{"scheduled","replaced","duplicates","kept","failed"}` as `delayq schedule --from`
    prints, plus `"errors":[{"index","error"}]`. A body with a malformed item (what the
    document's schema refuses: an unknown field, a wrong type, a bad id, not exactly one due
    form, a bad mode) is refused whole with 400 naming the item's index, and nothing of it is
    scheduled; an item the store refuses (a payload over `max_payload`) fails alone.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        traceparent (None | str | Unset):
        body (list[BulkTask]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BulkScheduled | ErrorBody
    """

    return sync_detailed(
        queue=queue,
        client=client,
        body=body,
        traceparent=traceparent,
    ).parsed


async def asyncio_detailed(
    queue: str,
    *,
    client: AuthenticatedClient,
    body: list[BulkTask],
    traceparent: None | str | Unset = UNSET,
) -> Response[BulkScheduled | ErrorBody]:
    """Schedules many tasks of one queue, each in its own `"mode"`:
    `{"scheduled","replaced","duplicates","kept","failed"}` as `delayq schedule --from`
    prints, plus `"errors":[{"index","error"}]`. A body with a malformed item (what the
    document's schema refuses: an unknown field, a wrong type, a bad id, not exactly one due
    form, a bad mode) is refused whole with 400 naming the item's index, and nothing of it is
    scheduled; an item the store refuses (a payload over `max_payload`) fails alone.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        traceparent (None | str | Unset):
        body (list[BulkTask]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[BulkScheduled | ErrorBody]
    """

    kwargs = _get_kwargs(
        queue=queue,
        body=body,
        traceparent=traceparent,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    queue: str,
    *,
    client: AuthenticatedClient,
    body: list[BulkTask],
    traceparent: None | str | Unset = UNSET,
) -> BulkScheduled | ErrorBody | None:
    """Schedules many tasks of one queue, each in its own `"mode"`:
    `{"scheduled","replaced","duplicates","kept","failed"}` as `delayq schedule --from`
    prints, plus `"errors":[{"index","error"}]`. A body with a malformed item (what the
    document's schema refuses: an unknown field, a wrong type, a bad id, not exactly one due
    form, a bad mode) is refused whole with 400 naming the item's index, and nothing of it is
    scheduled; an item the store refuses (a payload over `max_payload`) fails alone.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        traceparent (None | str | Unset):
        body (list[BulkTask]):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        BulkScheduled | ErrorBody
    """

    return (
        await asyncio_detailed(
            queue=queue,
            client=client,
            body=body,
            traceparent=traceparent,
        )
    ).parsed
