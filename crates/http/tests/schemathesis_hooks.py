"""Schemathesis hooks of crates/http/tests/schemathesis.rs: the one rule of the document that
JSON Schema cannot state. A recurring spec's end_at must be after its start_at (a comparison of
two fields' values); the server refuses the rest with 400, as the document's description says,
so bodies that give both in the wrong order are not drawn."""

from datetime import datetime

import schemathesis


def _epoch_ms(value):
    """A spec time (epoch milliseconds as a number or text, or RFC 3339) in milliseconds."""
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        if value.isdigit():
            return int(value)
        try:
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return None
    return None


@schemathesis.hook
def filter_body(context, body):
    operation = context.operation
    if operation is None or operation.path != "/v1/recurring/{name}" or not isinstance(body, dict):
        return True
    start, end = _epoch_ms(body.get("start_at")), _epoch_ms(body.get("end_at"))
    return start is None or end is None or end > start
