"""amos for Python: a node's memories, recall and context packs, gated by who
asks, from the same home as the ``amos`` command line and ``amos serve``.

    import amos
    node = amos.Node("~/.local/share/amos")
    mid = node.add("we deploy on Tuesdays", as_="alice", share="team:apollo")
    for hit in node.search("when do we deploy", as_="bob"):
        print(hit["id"], hit["score"], hit["content"])

``as_`` names the requesting agent exactly as the CLI's ``--as``: what it may
not see never reaches a result, a count or a ranking. Results are the dicts
``amos --json`` prints; errors are :mod:`amos.errors` exceptions carrying the
CLI's exit code. ``amos.langgraph.AmosStore`` and ``amos.crewai.AmosStorage``
put LangGraph and CrewAI memory in a node. See docs/python.md.
"""

from __future__ import annotations

from . import errors
from ._amos import DEFAULT_BUDGET, DEFAULT_K, Node
from .errors import (
    AmosError,
    BadInputError,
    NoSuchMemoryError,
    NotAHomeError,
    RefusedError,
    UnknownNameError,
    UnreachableError,
)

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_K",
    "AmosError",
    "BadInputError",
    "NoSuchMemoryError",
    "Node",
    "NotAHomeError",
    "RefusedError",
    "UnknownNameError",
    "UnreachableError",
    "errors",
]
