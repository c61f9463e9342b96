from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_body import ErrorBody
from ...models.scheduled import Scheduled
from ...models.task_body import TaskBody
from ...types import UNSET, Response, Unset


def _get_kwargs(
    queue: str,
    id: str,
    *,
    body: TaskBody,
    traceparent: None | str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(traceparent, Unset):
        headers["traceparent"] = traceparent

    _kwargs: dict[str, Any] = {
        "method": "put",
        "url": "/v1/queues/{queue}/tasks/{id}".format(
            queue=quote(str(queue), safe=""),
            id=quote(str(id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> ErrorBody | Scheduled | None:
    if response.status_code == 200:
        response_200 = Scheduled.from_dict(response.json())

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
) -> Response[ErrorBody | Scheduled]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    queue: str,
    id: str,
    *,
    client: AuthenticatedClient,
    body: TaskBody,
    traceparent: None | str | Unset = UNSET,
) -> Response[ErrorBody | Scheduled]:
    """Schedules one task in its mode (replace by default); answers as `delayq schedule`.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        id (str): 1 to 512 bytes of UTF-8 (512 ASCII characters, fewer when they take more bytes),
            no NUL Example: order-42.
        traceparent (None | str | Unset):
        body (TaskBody): Exactly one of delay_ms, due_ms, in and at; an optional payload and mode.
            A field is given with its value or left out (null is refused). An "id" equal to the path's
            is tolerated. Example: {'in': '30s', 'payload': '{"order":42}'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | Scheduled]
    """

    kwargs = _get_kwargs(
        queue=queue,
        id=id,
        body=body,
        traceparent=traceparent,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    queue: str,
    id: str,
    *,
    client: AuthenticatedClient,
    body: TaskBody,
    traceparent: None | str | Unset = UNSET,
) -> ErrorBody | Scheduled | None:
    """Schedules one task in its mode (replace by default); answers as `delayq schedule`.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        id (str): 1 to 512 bytes of UTF-8 (512 ASCII characters, fewer when they take more bytes),
            no NUL Example: order-42.
        traceparent (None | str | Unset):
        body (TaskBody): Exactly one of delay_ms, due_ms, in and at; an optional payload and mode.
            A field is given with its value or left out (null is refused). An "id" equal to the path's
            is tolerated. Example: {'in': '30s', 'payload': '{"order":42}'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | Scheduled
    """

    return sync_detailed(
        queue=queue,
        id=id,
        client=client,
        body=body,
        traceparent=traceparent,
    ).parsed


async def asyncio_detailed(
    queue: str,
    id: str,
    *,
    client: AuthenticatedClient,
    body: TaskBody,
    traceparent: None | str | Unset = UNSET,
) -> Response[ErrorBody | Scheduled]:
    """Schedules one task in its mode (replace by default); answers as `delayq schedule`.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        id (str): 1 to 512 bytes of UTF-8 (512 ASCII characters, fewer when they take more bytes),
            no NUL Example: order-42.
        traceparent (None | str | Unset):
        body (TaskBody): Exactly one of delay_ms, due_ms, in and at; an optional payload and mode.
            A field is given with its value or left out (null is refused). An "id" equal to the path's
            is tolerated. Example: {'in': '30s', 'payload': '{"order":42}'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | Scheduled]
    """

    kwargs = _get_kwargs(
        queue=queue,
        id=id,
        body=body,
        traceparent=traceparent,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    queue: str,
    id: str,
    *,
    client: AuthenticatedClient,
    body: TaskBody,
    traceparent: None | str | Unset = UNSET,
) -> ErrorBody | Scheduled | None:
    """Schedules one task in its mode (replace by default); answers as `delayq schedule`.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        id (str): 1 to 512 bytes of UTF-8 (512 ASCII characters, fewer when they take more bytes),
            no NUL Example: order-42.
        traceparent (None | str | Unset):
        body (TaskBody): Exactly one of delay_ms, due_ms, in and at; an optional payload and mode.
            A field is given with its value or left out (null is refused). An "id" equal to the path's
            is tolerated. Example: {'in': '30s', 'payload': '{"order":42}'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | Scheduled
    """

    return (
        await asyncio_detailed(
            queue=queue,
            id=id,
            client=client,
            body=body,
            traceparent=traceparent,
        )
    ).parsed
