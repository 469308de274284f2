"""What the LangGraph and CrewAI adapters share: reading an amos timestamp
and matching a value against a filter. No rule of who may see what lives
here: every memory these functions see came through the node's gate."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping


def when(rfc3339: str) -> datetime:
    """An amos timestamp (``2026-03-01T12:00:00Z``) as an aware datetime."""
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))


_OPS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` passes ``filter``: each key equal to its value, or
    to each ``{"$op": operand}`` of LangGraph's operators ($eq, $ne, $gt,
    $gte, $lt, $lte)."""
    if not filter:
        return True
    for key, want in filter.items():
        have = value.get(key)
        if isinstance(want, Mapping) and want and all(str(k).startswith("$") for k in want):
            for op, operand in want.items():
                test = _OPS.get(op)
                if test is None:
                    raise ValueError(f"unsupported filter operator {op!r}")
                try:
                    if not test(have, operand):
                        return False
                except TypeError:
                    return False
        elif have != want:
            return False
    return True
