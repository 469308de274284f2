"""amos.crewai.AmosStorage against the real crewai package: CrewAI's
``Memory`` keeps its records in an amos node and recalls them through the
node's gate. No model and no network: the LLM is a test double that fails
if CrewAI ever calls it, and AmosEmbedder calls no model."""

from __future__ import annotations

import pytest

pytest.importorskip("crewai", reason="pip install crewai to test amos.crewai")

from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.memory.storage.backend import StorageBackend  # noqa: E402
from crewai.memory.unified_memory import Memory  # noqa: E402

import amos  # noqa: E402
from amos.crewai import AmosEmbedder, AmosStorage  # noqa: E402


class NoLLM(BaseLLM):
    """An LLM that must never be called."""

    def call(self, messages, *args, **kwargs):
        raise AssertionError(f"CrewAI called the LLM: {messages!r}")


def memory(home, agent, **kw):
    return Memory(
        storage=AmosStorage(home.path, agent, **kw),
        embedder=AmosEmbedder(),
        llm=NoLLM(model="none"),
    )


def remember(mem, text, scope="/ops", categories=("ops",), **kw):
    return mem.remember(text, scope=scope, categories=list(categories), importance=0.7, **kw)


def test_the_storage_is_a_crewai_backend(home):
    assert isinstance(AmosStorage(home.path, "alice"), StorageBackend)


def test_remember_and_recall_through_crewai_memory(home):
    mem = memory(home, "alice", share="team:apollo", mode="lexical")
    rec = remember(mem, "the staging cluster restarts every sunday", metadata={"ticket": "OPS-7"})
    remember(mem, "invoices are approved by finance", scope="/finance", categories=["money"])
    # The record is the memory: its id is the amos id, and the CLI sees it.
    got = home.json("get", rec.id, "--as", "bob")
    assert got["content"] == "the staging cluster restarts every sunday"
    assert got["visibility"] == ["team:apollo"] and got["type"] == "crewai"

    matches = mem.recall("staging cluster restarts", depth="shallow")
    assert [m.record.id for m in matches] == [rec.id]
    r = matches[0].record
    assert (r.scope, r.categories, r.metadata) == ("/ops", ["ops"], {"ticket": "OPS-7"})
    assert r.importance == pytest.approx(0.7)
    assert 0 < matches[0].score <= 1

    assert mem.recall("staging cluster", scope="/finance", depth="shallow") == []
    assert [m.record.content for m in mem.recall("invoices", categories=["money"], depth="shallow")] == [
        "invoices are approved by finance"
    ]
    assert mem.list_scopes("/") == ["/finance", "/ops"]
    assert mem.list_categories() == {"ops": 1, "money": 1}
    assert mem.info("/ops").record_count == 1
    assert [x.id for x in mem.list_records("/ops")] == [rec.id]

    mem.update(rec.id, content="the staging cluster restarts every saturday")
    assert home.json("get", rec.id, "--as", "alice")["content"].endswith("saturday")
    assert mem.forget(record_ids=[rec.id]) == 1
    assert mem.recall("staging cluster", depth="shallow") == []
    assert home.run("get", rec.id, "--as", "alice", check=False).returncode == 2


def test_recall_is_gated_for_the_agent(home):
    alice_private = memory(home, "alice", mode="lexical")
    alice_team = memory(home, "alice", share="team:apollo", mode="lexical")
    bob = memory(home, "bob", mode="lexical")
    eve = memory(home, "eve", mode="lexical")
    secret = remember(alice_private, "the payroll vault code is 4242")
    shared = remember(alice_team, "the payroll run is on fridays")

    assert [m.record.id for m in bob.recall("payroll", depth="shallow")] == [shared.id]
    assert eve.recall("payroll", depth="shallow") == []
    assert sorted(m.record.id for m in alice_private.recall("payroll", depth="shallow")) == sorted(
        [secret.id, shared.id]
    )
    bob_storage = bob._storage
    assert bob_storage.get_record(secret.id) is None
    assert bob_storage.count() == 1 and bob.list_categories() == {"ops": 1}
    # bob cannot forget alice's memory; it stays.
    with pytest.raises(amos.RefusedError):
        bob.forget(record_ids=[shared.id])
    assert alice_team._storage.get_record(shared.id) is not None
    # reset forgets only the agent's own records.
    bob.reset()
    assert alice_team._storage.get_record(shared.id) is not None
    alice_private.reset("/ops")
    assert alice_private._storage.count() == 0


def test_a_foreign_vector_is_refused_with_the_fix(home):
    storage = AmosStorage(home.path, "alice")
    with pytest.raises(ValueError, match="AmosEmbedder"):
        storage.search([0.1, 0.2, 0.3])
    a, b = AmosEmbedder()(["deploy on tuesday", "deploy on thursdy"])
    assert len(a) == len(b) and a != b
