from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_body import ErrorBody
from ...models.held_key import HeldKey
from ...types import UNSET, Response, Unset


def _get_kwargs(
    queue: str,
    *,
    limit: int | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["limit"] = limit

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/queues/{queue}/keys".format(
            queue=quote(str(queue), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorBody | list[HeldKey] | None:
    if response.status_code == 200:
        response_200 = []
        _response_200 = response.json()
        for componentsschemas_held_keys_item_data in _response_200:
            componentsschemas_held_keys_item = HeldKey.from_dict(componentsschemas_held_keys_item_data)

            response_200.append(componentsschemas_held_keys_item)

        return response_200

    if response.status_code == 400:
        response_400 = ErrorBody.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = ErrorBody.from_dict(response.json())

        return response_401

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
) -> Response[ErrorBody | list[HeldKey]]:
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
    limit: int | Unset = UNSET,
) -> Response[ErrorBody | list[HeldKey]]:
    """The flow keys holding tasks back, the most waiting first (empty for an unknown queue or a
    queue without `flow_keys`, as the other listings answer for an unknown queue).

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        limit (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | list[HeldKey]]
    """

    kwargs = _get_kwargs(
        queue=queue,
        limit=limit,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    queue: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = UNSET,
) -> ErrorBody | list[HeldKey] | None:
    """The flow keys holding tasks back, the most waiting first (empty for an unknown queue or a
    queue without `flow_keys`, as the other listings answer for an unknown queue).

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        limit (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | list[HeldKey]
    """

    return sync_detailed(
        queue=queue,
        client=client,
        limit=limit,
    ).parsed


async def asyncio_detailed(
    queue: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = UNSET,
) -> Response[ErrorBody | list[HeldKey]]:
    """The flow keys holding tasks back, the most waiting first (empty for an unknown queue or a
    queue without `flow_keys`, as the other listings answer for an unknown queue).

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        limit (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | list[HeldKey]]
    """

    kwargs = _get_kwargs(
        queue=queue,
        limit=limit,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    queue: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = UNSET,
) -> ErrorBody | list[HeldKey] | None:
    """The flow keys holding tasks back, the most waiting first (empty for an unknown queue or a
    queue without `flow_keys`, as the other listings answer for an unknown queue).

    Args:
        queue (str): 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-' Example: orders.
        limit (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | list[HeldKey]
    """

    return (
        await asyncio_detailed(
            queue=queue,
            client=client,
            limit=limit,
        )
    ).parsed
