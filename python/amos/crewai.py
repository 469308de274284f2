"""A CrewAI memory storage backend in an amos node: ``AmosStorage``.

    from crewai import Memory
    from amos.crewai import AmosEmbedder, AmosStorage

    memory = Memory(storage=AmosStorage(home, "alice", share="team:apollo"),
                    embedder=AmosEmbedder())

Every CrewAI record is one amos memory owned by ``agent``, of type
``crewai``, shared with ``share`` (default: private to the agent). Its text is
the memory's content; its CrewAI scope, categories, source, private flag and
scalar metadata are tags (``scope:/a/b``, ``cat:NAME``, ``source:S``,
``crewai:private``, ``meta:KEY=JSON``); its importance is the memory's.

CrewAI hands a storage backend a query *vector*. amos recalls by text, with
its own models and through its gate, so :class:`AmosEmbedder` calls no model:
each "embedding" it returns carries its text (and a hash block, so CrewAI's
duplicate check still tells two texts apart), and ``AmosStorage.search``
reads the text back and runs the node's gated recall for the agent. A vector
from another embedder is refused with a clear error.

Limits: a record's tags are fixed when it is saved, so ``update`` changes
its content only; a metadata value that is not a short scalar (tags are at
most 64 characters, without commas) is not kept, with a warning.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import warnings
from collections import Counter
from datetime import datetime, timezone
from typing import Any

from crewai.memory.types import MemoryRecord, ScopeInfo

from . import Node
from ._items import matches, when
from .errors import NoSuchMemoryError

TYPE = "crewai"
_MARK = 0.000123  # first component of an AmosEmbedder vector
_SCALE = 1e-6  # a code point's weight in the vector
_HASH_DIMS = 32
_MAX_K = 1000
_ALL = 1_000_000
_MAX_TAG = 64


class AmosEmbedder:
    """CrewAI's ``embedder``: a vector that carries its text to
    :class:`AmosStorage`, which recalls by text. Calls no model."""

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [_encode(t) for t in texts]


def _encode(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    block = [1.0 if digest[i // 8] >> (i % 8) & 1 else -1.0 for i in range(_HASH_DIMS)]
    return [_MARK, len(text) * _SCALE, *block, *(ord(c) * _SCALE for c in text)]


def _decode(vector: list[float]) -> str:
    if len(vector) < 2 + _HASH_DIMS or vector[0] != _MARK:
        raise ValueError(
            "AmosStorage recalls by text: give the Memory embedder=amos.crewai.AmosEmbedder()"
        )
    n = round(vector[1] / _SCALE)
    codes = vector[2 + _HASH_DIMS :]
    if n != len(codes):
        raise ValueError("not a vector AmosEmbedder made")
    return "".join(chr(round(x / _SCALE)) for x in codes)


def _naive_utc(rfc3339: str) -> datetime:
    # CrewAI's records hold naive UTC times (datetime.utcnow()).
    return when(rfc3339).astimezone(timezone.utc).replace(tzinfo=None)


def _under(scope: str, prefix: str | None) -> bool:
    if prefix is None or prefix.strip("/") == "":
        return True
    p = "/" + prefix.strip("/")
    return scope == p or scope.startswith(p + "/")


def _tags(r: MemoryRecord) -> list[str]:
    tags = [f"scope:{r.scope or '/'}"] + [f"cat:{c}" for c in r.categories]
    if r.source is not None:
        tags.append(f"source:{r.source}")
    if r.private:
        tags.append("crewai:private")
    dropped = []
    for key, value in (r.metadata or {}).items():
        tag = f"meta:{key}={json.dumps(value)}" if isinstance(value, (str, int, float, bool)) else None
        if tag is None or len(tag) > _MAX_TAG or "," in tag or any(ord(c) < 32 for c in tag):
            dropped.append(key)
        else:
            tags.append(tag)
    if dropped:
        warnings.warn(f"amos keeps short scalar metadata only; not kept: {sorted(dropped)}", stacklevel=3)
    return tags


def _record(m: dict[str, Any]) -> MemoryRecord | None:
    if m.get("type") != TYPE:
        return None
    scope, categories, metadata, source, private = "/", [], {}, None, False
    for t in m.get("tags", []):
        if t.startswith("scope:"):
            scope = t[len("scope:") :]
        elif t.startswith("cat:"):
            categories.append(t[len("cat:") :])
        elif t.startswith("source:"):
            source = t[len("source:") :]
        elif t == "crewai:private":
            private = True
        elif t.startswith("meta:") and "=" in t:
            key, _, raw = t[len("meta:") :].partition("=")
            try:
                metadata[key] = json.loads(raw)
            except ValueError:
                metadata[key] = raw
    return MemoryRecord(
        id=m["id"],
        content=m["content"],
        scope=scope,
        categories=categories,
        metadata=metadata,
        importance=min(1.0, max(0.0, float(m["importance"]))),
        created_at=_naive_utc(m["created"]),
        last_accessed=_naive_utc(m["updated"]),
        source=source,
        private=private,
    )


class AmosStorage:
    """A CrewAI ``StorageBackend``: ``agent``'s memories in the amos home
    ``home`` (or the open ``node``), shared with ``share`` (a scope or a
    list; default private). ``mode`` is the recall mode of ``search``."""

    def __init__(
        self,
        home: str | None = None,
        agent: str | None = None,
        *,
        share: str | list[str] | None = None,
        node: Node | None = None,
        mode: str | None = None,
    ) -> None:
        if agent is None:
            raise TypeError("AmosStorage needs the agent it stores for: AmosStorage(home, agent)")
        if node is None:
            if home is None:
                raise TypeError("AmosStorage needs a home (or an open node=)")
            node = Node(home)
        self.node = node
        self.agent = agent
        self.share = share
        self.mode = mode
        node.list(as_=agent, limit=1)  # an unknown agent fails here, not later

    # -- writes ------------------------------------------------------------

    def save(self, records: list[MemoryRecord]) -> None:
        for r in records:
            mid = self.node.add(
                r.content,
                as_=self.agent,
                share=self.share,
                type=TYPE,
                tags=_tags(r),
                importance=r.importance,
            )
            r.id = mid  # the record is now the memory: get_record(r.id) finds it

    def update(self, record: MemoryRecord) -> None:
        current = self.node.get(record.id, as_=self.agent)
        if current["content"] != record.content:
            self.node.update(record.id, record.content, as_=self.agent)

    def delete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        if record_ids is not None:
            candidates = [r for r in (self.get_record(i) for i in record_ids) if r is not None]
        else:
            candidates = self._records()
        gone = 0
        for r in candidates:
            if not _under(r.scope, scope_prefix):
                continue
            if categories and not set(categories) & set(r.categories):
                continue
            if older_than is not None and r.created_at >= _naive(older_than):
                continue
            if not matches(r.metadata, metadata_filter):
                continue
            self.node.forget(r.id, as_=self.agent)
            gone += 1
        return gone

    def reset(self, scope_prefix: str | None = None) -> None:
        mine = [r for r in self._records(mine=True) if _under(r.scope, scope_prefix)]
        for r in mine:
            self.node.forget(r.id, as_=self.agent)

    # -- reads ------------------------------------------------------------

    def search(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        query = _decode(query_embedding)
        k = min(_MAX_K, max(4 * limit, 40))
        while True:
            hits = self.node.search(query, as_=self.agent, k=k, mode=self.mode)
            out = []
            for h in hits:
                r = _record(h)
                if r is None or not _under(r.scope, scope_prefix):
                    continue
                if categories and not set(categories) & set(r.categories):
                    continue
                if not matches(r.metadata, metadata_filter):
                    continue
                score = min(1.0, max(0.0, float(h["relevance"])))
                if score >= min_score:
                    out.append((r, score))
            if len(out) >= limit or len(hits) < k or k >= _MAX_K:
                return out[:limit]
            k = _MAX_K

    def get_record(self, record_id: str) -> MemoryRecord | None:
        try:
            return _record(self.node.get(record_id, as_=self.agent))
        except NoSuchMemoryError:
            return None

    def _records(self, mine: bool = False) -> list[MemoryRecord]:
        memories = self.node.list(as_=self.agent, type=TYPE, limit=_ALL)
        out = []
        for m in memories:
            if mine and m["owner"] != self.agent:
                continue
            r = _record(m)
            if r is not None:
                out.append(r)
        out.sort(key=lambda r: r.created_at, reverse=True)
        return out

    def list_records(
        self, scope_prefix: str | None = None, limit: int = 200, offset: int = 0
    ) -> list[MemoryRecord]:
        rs = [r for r in self._records() if _under(r.scope, scope_prefix)]
        return rs[offset : offset + limit]

    def count(self, scope_prefix: str | None = None) -> int:
        return sum(1 for r in self._records() if _under(r.scope, scope_prefix))

    def list_categories(self, scope_prefix: str | None = None) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for r in self._records():
            if _under(r.scope, scope_prefix):
                counts.update(r.categories)
        return dict(counts)

    def list_scopes(self, parent: str = "/") -> list[str]:
        base = "/" + parent.strip("/") if parent.strip("/") else ""
        children = set()
        for r in self._records():
            if not _under(r.scope, parent):
                continue
            rest = r.scope[len(base) :].strip("/")
            if rest:
                children.add(f"{base}/{rest.split('/')[0]}")
        return sorted(children)

    def get_scope_info(self, scope: str) -> ScopeInfo:
        rs = [r for r in self._records() if _under(r.scope, scope)]
        return ScopeInfo(
            path=scope,
            record_count=len(rs),
            categories=sorted({c for r in rs for c in r.categories}),
            oldest_record=min((r.created_at for r in rs), default=None),
            newest_record=max((r.created_at for r in rs), default=None),
            child_scopes=self.list_scopes(scope),
        )

    def close(self) -> None:
        """Nothing to release: the node closes with this object."""

    # -- async twins ----------------------------------------------------

    async def asave(self, records: list[MemoryRecord]) -> None:
        await asyncio.to_thread(self.save, records)

    async def asearch(self, query_embedding: list[float], **kw: Any) -> list[tuple[MemoryRecord, float]]:
        return await asyncio.to_thread(self.search, query_embedding, **kw)

    async def adelete(self, **kw: Any) -> int:
        return await asyncio.to_thread(self.delete, **kw)


def _naive(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


__all__ = ["AmosEmbedder", "AmosStorage"]
