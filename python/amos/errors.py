"""The exceptions of the amos package.

Each carries the message the ``amos`` command line prints for the same
failure and ``exit_code``, the code it exits with (docs/cli.md: 1 failed,
2 bad input, 3 refused). The node raises them; nothing here decides a code.
"""

from __future__ import annotations


class AmosError(Exception):
    """A failed operation; ``exit_code`` is the CLI's for the same failure."""

    def __init__(self, message: str, exit_code: int = 1, **fields: object) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        for name, value in fields.items():
            setattr(self, name, value)


class BadInputError(AmosError, ValueError):
    """Bad input: a malformed scope, time or id, an empty content (exit 2)."""


class NoSuchMemoryError(BadInputError, KeyError):
    """The memory does not exist, or the requester may not see it: the two
    are one answer by design (exit 2)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class UnknownNameError(BadInputError):
    """A well-formed name this node does not know: ``kind`` is ``agent``,
    ``team``, ``project`` or ``peer``, ``name`` the name given (exit 2)."""


class NotAHomeError(BadInputError):
    """The directory ``path`` is not an amos home: run ``amos init`` (exit 2)."""


class RefusedError(AmosError, PermissionError):
    """The requester may not do this; ``rule`` is the refusing rule's stable
    code, e.g. ``not_owner`` (exit 3)."""


class UnreachableError(AmosError, ConnectionError):
    """A peer could not be reached at any address tried (exit 1)."""


__all__ = [
    "AmosError",
    "BadInputError",
    "NoSuchMemoryError",
    "NotAHomeError",
    "RefusedError",
    "UnknownNameError",
    "UnreachableError",
]
