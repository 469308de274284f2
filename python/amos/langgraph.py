"""A LangGraph store in an amos node: ``AmosStore(home, agent)``.

Every item is one amos memory owned by ``agent``, of type ``langgraph``;
its content is the JSON ``{"namespace": [...], "key": ..., "value": {...}}``
(so recall finds it by the words of its value) and one tag names its
namespace and key (``lg`` and a hash), which is how ``get`` finds it.

Namespaces map onto scopes: an item's visibility is its namespace's
first labels —

    ("team", "apollo", ...)      shared with team:apollo
    ("project", "apollo-ui", ...) shared with project:apollo-ui
    ("agent", "bob", ...)        shared with agent:bob
    ("global", ...)              shared with global
    anything else                private to the agent

``search(namespace_prefix, query=...)`` is the node's gated recall for the
agent (what it may not see is never a candidate), narrowed to the prefix;
without a query it lists the agent's visible items, newest first. A
team-mate's item under the same namespace and key is read like one's own;
``put`` over it writes one's own (the newer is read), and ``delete`` of it is
refused (only an owner forgets a memory).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from . import Node
from ._items import matches, when

TYPE = "langgraph"
_SCOPED = ("team", "project", "agent")
# A recall asks for this many hits at most (amos search's -k ceiling).
_MAX_K = 1000
# Lists every visible item (no query).
_ALL = 1_000_000


def scope_of(namespace: tuple[str, ...]) -> str | None:
    """The scope a namespace's items are shared with; None: private."""
    if len(namespace) >= 2 and namespace[0] in _SCOPED:
        return f"{namespace[0]}:{namespace[1]}"
    if namespace and namespace[0] == "global":
        return "global"
    return None


def tag_of(namespace: tuple[str, ...], key: str) -> str:
    """The tag that finds an item: one word (``lg`` and 30 hex digits)."""
    digest = hashlib.sha256(json.dumps([list(namespace), key]).encode()).hexdigest()
    return "lg" + digest[:30]


def _item(memory: dict[str, Any], score: float | None = None) -> SearchItem | None:
    """The item a memory holds, or None if it holds none."""
    if memory.get("type") != TYPE:
        return None
    try:
        body = json.loads(memory["content"])
        namespace = tuple(body["namespace"])
        key = body["key"]
        value = body["value"]
    except (ValueError, KeyError, TypeError):
        return None
    if tag_of(namespace, key) not in memory.get("tags", []):
        return None
    return SearchItem(
        namespace=namespace,
        key=key,
        value=value,
        created_at=when(memory["created"]),
        updated_at=when(memory["updated"]),
        score=score,
    )


class AmosStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are ``agent``'s memories in the
    amos home ``home`` (or in the open ``node``). ``mode`` is the recall
    mode of ``search`` with a query (the node's default: hybrid)."""

    def __init__(
        self,
        home: str | None = None,
        agent: str | None = None,
        *,
        node: Node | None = None,
        mode: str | None = None,
    ) -> None:
        if agent is None:
            raise TypeError("AmosStore needs the agent it stores for: AmosStore(home, agent)")
        if node is None:
            if home is None:
                raise TypeError("AmosStore needs a home (or an open node=)")
            node = Node(home)
        self.node = node
        self.agent = agent
        self.mode = mode
        node.list(as_=agent, limit=1)  # an unknown agent fails here, not later

    # -- the one abstract pair ------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op.namespace, op.key))
            elif isinstance(op, PutOp):
                self._put(op.namespace, op.key, op.value)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._namespaces(op))
            else:
                raise ValueError(f"unknown operation {op!r}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        # The node lets go of the interpreter lock while it works.
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))

    # -- operations ------------------------------------------------------

    def _found(self, namespace: tuple[str, ...], key: str) -> list[tuple[dict[str, Any], Item]]:
        """The visible memories holding this item, newest first."""
        tag = tag_of(namespace, key)
        hits = self.node.search(tag, as_=self.agent, mode="lexical", k=_MAX_K)
        found = []
        for hit in hits:
            item = _item(hit)
            if item is not None and item.namespace == namespace and item.key == key:
                found.append((hit, item))
        found.sort(key=lambda f: (f[0]["updated"], f[0]["id"]), reverse=True)
        return found

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        found = self._found(namespace, key)
        if not found:
            return None
        item = found[0][1]
        return Item(
            value=item.value,
            key=item.key,
            namespace=item.namespace,
            created_at=item.created_at,
            updated_at=item.updated_at,
        )

    def _put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any] | None) -> None:
        found = self._found(namespace, key)
        if value is None:
            for memory, _ in found:
                self.node.forget(memory["id"], as_=self.agent)
            return
        content = json.dumps(
            {"namespace": list(namespace), "key": key, "value": value}, ensure_ascii=False
        )
        own = [m for m, _ in found if m["owner"] == self.agent]
        if own:
            if own[0]["content"] != content:
                self.node.update(own[0]["id"], content, as_=self.agent)
            return
        self.node.add(
            content,
            as_=self.agent,
            share=scope_of(namespace),
            type=TYPE,
            tags=[tag_of(namespace, key)],
        )

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        want = op.offset + op.limit

        def keep(items: Iterable[SearchItem | None]) -> list[SearchItem]:
            seen: set[tuple[tuple[str, ...], str]] = set()
            out = []
            for item in items:
                if item is None or item.namespace[: len(prefix)] != prefix:
                    continue
                if (item.namespace, item.key) in seen or not matches(item.value, op.filter):
                    continue
                seen.add((item.namespace, item.key))
                out.append(item)
            return out

        if op.query:
            k = min(_MAX_K, max(4 * want, 40))
            while True:
                hits = self.node.search(op.query, as_=self.agent, k=k, mode=self.mode)
                items = keep(_item(h, h["score"]) for h in hits)
                if len(items) >= want or len(hits) < k or k >= _MAX_K:
                    break
                k = _MAX_K
        else:
            memories = self.node.list(as_=self.agent, type=TYPE, limit=_ALL)
            memories.sort(key=lambda m: m["updated"], reverse=True)
            items = keep(_item(m) for m in memories)
        return items[op.offset : want]

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        memories = self.node.list(as_=self.agent, type=TYPE, limit=_ALL)
        spaces = set()
        for m in memories:
            item = _item(m)
            if item is None:
                continue
            ns = item.namespace
            if op.match_conditions and not all(_fits(ns, c) for c in op.match_conditions):
                continue
            if op.max_depth is not None:
                ns = ns[: op.max_depth]
            spaces.add(ns)
        return sorted(spaces)[op.offset : op.offset + op.limit]


def _fits(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(path) > len(namespace):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part))


__all__ = ["AmosStore", "scope_of", "tag_of"]
