from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error_body import ErrorBody
from ...models.recurring_body import RecurringBody
from ...models.recurring_set import RecurringSet
from ...types import Response


def _get_kwargs(
    name: str,
    *,
    body: RecurringBody,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "put",
        "url": "/v1/recurring/{name}".format(
            name=quote(str(name), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> ErrorBody | RecurringSet | None:
    if response.status_code == 200:
        response_200 = RecurringSet.from_dict(response.json())

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
) -> Response[ErrorBody | RecurringSet]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    name: str,
    *,
    client: AuthenticatedClient,
    body: RecurringBody,
) -> Response[ErrorBody | RecurringSet]:
    """Creates or updates the schedule; answers as `delayq recurring set`:
    `{"name","queue","next_ms","result":"created|updated|unchanged"}`.

    Args:
        name (str): 1 to 128 characters of A-Z, a-z, 0-9, '_', '.', ':' and '-' Example: nightly-
            report.
        body (RecurringBody): The spec, as the flags of `delayq recurring set`: a queue and
            exactly one of cron (with an optional tz) and every. A field is given with its value or
            left out (null is refused). end_at, when given with start_at, must be after it. Example:
            {'cron': '0 9 * * 1', 'queue': 'reports', 'tz': 'Europe/Berlin'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | RecurringSet]
    """

    kwargs = _get_kwargs(
        name=name,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    name: str,
    *,
    client: AuthenticatedClient,
    body: RecurringBody,
) -> ErrorBody | RecurringSet | None:
    """Creates or updates the schedule; answers as `delayq recurring set`:
    `{"name","queue","next_ms","result":"created|updated|unchanged"}`.

    Args:
        name (str): 1 to 128 characters of A-Z, a-z, 0-9, '_', '.', ':' and '-' Example: nightly-
            report.
        body (RecurringBody): The spec, as the flags of `delayq recurring set`: a queue and
            exactly one of cron (with an optional tz) and every. A field is given with its value or
            left out (null is refused). end_at, when given with start_at, must be after it. Example:
            {'cron': '0 9 * * 1', 'queue': 'reports', 'tz': 'Europe/Berlin'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | RecurringSet
    """

    return sync_detailed(
        name=name,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    name: str,
    *,
    client: AuthenticatedClient,
    body: RecurringBody,
) -> Response[ErrorBody | RecurringSet]:
    """Creates or updates the schedule; answers as `delayq recurring set`:
    `{"name","queue","next_ms","result":"created|updated|unchanged"}`.

    Args:
        name (str): 1 to 128 characters of A-Z, a-z, 0-9, '_', '.', ':' and '-' Example: nightly-
            report.
        body (RecurringBody): The spec, as the flags of `delayq recurring set`: a queue and
            exactly one of cron (with an optional tz) and every. A field is given with its value or
            left out (null is refused). end_at, when given with start_at, must be after it. Example:
            {'cron': '0 9 * * 1', 'queue': 'reports', 'tz': 'Europe/Berlin'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | RecurringSet]
    """

    kwargs = _get_kwargs(
        name=name,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    name: str,
    *,
    client: AuthenticatedClient,
    body: RecurringBody,
) -> ErrorBody | RecurringSet | None:
    """Creates or updates the schedule; answers as `delayq recurring set`:
    `{"name","queue","next_ms","result":"created|updated|unchanged"}`.

    Args:
        name (str): 1 to 128 characters of A-Z, a-z, 0-9, '_', '.', ':' and '-' Example: nightly-
            report.
        body (RecurringBody): The spec, as the flags of `delayq recurring set`: a queue and
            exactly one of cron (with an optional tz) and every. A field is given with its value or
            left out (null is refused). end_at, when given with start_at, must be after it. Example:
            {'cron': '0 9 * * 1', 'queue': 'reports', 'tz': 'Europe/Berlin'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | RecurringSet
    """

    return (
        await asyncio_detailed(
            name=name,
            client=client,
            body=body,
        )
    ).parsed
