from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_body import ErrorBody
from ...models.queue_deleted import QueueDeleted
from ...types import UNSET, Response, Unset


def _get_kwargs(
    queue: str,
    *,
    force: bool | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["force"] = force

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "delete",
        "url": "/v1/queues/{queue}".format(
            queue=quote(str(queue), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorBody | QueueDeleted | None:
    if response.status_code == 200:
        response_200 = QueueDeleted.from_dict(response.json())

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

    if response.status_code == 404:
        response_404 = ErrorBody.from_dict(response.json())

        return response_404

    if response.status_code == 409:
        response_409 = ErrorBody.from_dict(response.json())

        return response_409

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
) -> Response[ErrorBody | QueueDeleted]:
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
    force: bool | Unset = UNSET,
) -> Response[ErrorBody | QueueDeleted]:
    """Deletes the queue and all its keys; `{"queue","deleted":true,"tasks":N}`. Without
    `?force=true`, a queue holding pending, in-flight or dead tasks is refused with 409 and
    `{"error","queue","pending","inflight","dead"}`; 404 for an unknown queue.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        force (bool | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | QueueDeleted]
    """

    kwargs = _get_kwargs(
        queue=queue,
        force=force,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    queue: str,
    *,
    client: AuthenticatedClient,
    force: bool | Unset = UNSET,
) -> ErrorBody | QueueDeleted | None:
    """Deletes the queue and all its keys; `{"queue","deleted":true,"tasks":N}`. Without
    `?force=true`, a queue holding pending, in-flight or dead tasks is refused with 409 and
    `{"error","queue","pending","inflight","dead"}`; 404 for an unknown queue.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        force (bool | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | QueueDeleted
    """

    return sync_detailed(
        queue=queue,
        client=client,
        force=force,
    ).parsed


async def asyncio_detailed(
    queue: str,
    *,
    client: AuthenticatedClient,
    force: bool | Unset = UNSET,
) -> Response[ErrorBody | QueueDeleted]:
    """Deletes the queue and all its keys; `{"queue","deleted":true,"tasks":N}`. Without
    `?force=true`, a queue holding pending, in-flight or dead tasks is refused with 409 and
    `{"error","queue","pending","inflight","dead"}`; 404 for an unknown queue.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        force (bool | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | QueueDeleted]
    """

    kwargs = _get_kwargs(
        queue=queue,
        force=force,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    queue: str,
    *,
    client: AuthenticatedClient,
    force: bool | Unset = UNSET,
) -> ErrorBody | QueueDeleted | None:
    """Deletes the queue and all its keys; `{"queue","deleted":true,"tasks":N}`. Without
    `?force=true`, a queue holding pending, in-flight or dead tasks is refused with 409 and
    `{"error","queue","pending","inflight","dead"}`; 404 for an unknown queue.

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        force (bool | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | QueueDeleted
    """

    return (
        await asyncio_detailed(
            queue=queue,
            client=client,
            force=force,
        )
    ).parsed
