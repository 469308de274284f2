"""amos.langgraph.AmosStore against the real langgraph package: a
``BaseStore`` whose namespaces are amos scopes and whose search is the
node's gated recall for the store's agent. No model, no network."""

from __future__ import annotations

import asyncio
from typing import TypedDict

import pytest

pytest.importorskip("langgraph", reason="pip install langgraph to test amos.langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402

import amos  # noqa: E402
from amos.langgraph import AmosStore  # noqa: E402


def test_put_get_delete_round_trip(home):
    store = AmosStore(home.path, "alice")
    assert isinstance(store, BaseStore)
    ns = ("notes", "deploys")
    store.put(ns, "k1", {"text": "we deploy on tuesdays", "n": 1})
    item = store.get(ns, "k1")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (ns, "k1", {"text": "we deploy on tuesdays", "n": 1})
    assert item.created_at <= item.updated_at
    assert store.get(ns, "k2") is None
    assert store.get(("notes",), "k1") is None, "the namespace is part of the key"

    store.put(ns, "k1", {"text": "we deploy on thursdays", "n": 2})
    assert store.get(ns, "k1").value["n"] == 2
    # One memory, edited in place: the node holds one langgraph memory.
    node = amos.Node(home.path)
    assert len(node.list(as_="alice", type="langgraph")) == 1

    store.delete(ns, "k1")
    assert store.get(ns, "k1") is None
    assert node.list(as_="alice", type="langgraph") == []


def test_namespaces_map_onto_scopes(home):
    alice = AmosStore(home.path, "alice")
    bob = AmosStore(home.path, "bob")
    eve = AmosStore(home.path, "eve")
    alice.put(("team", "apollo", "runbooks"), "deploy", {"text": "deploys go out on tuesdays"})
    alice.put(("prefs",), "coffee", {"text": "alice drinks her coffee black"})
    alice.put(("agent", "eve"), "hello", {"text": "eve: the deploy freeze starts friday"})

    node = amos.Node(home.path)
    vis = {m["content"]: m["visibility"] for m in node.list(as_="alice", type="langgraph")}
    assert sorted(vis.values()) == [["agent:eve"], ["private"], ["team:apollo"]]

    assert bob.get(("team", "apollo", "runbooks"), "deploy").value["text"] == "deploys go out on tuesdays"
    assert bob.get(("prefs",), "coffee") is None, "alice's private item"
    assert eve.get(("team", "apollo", "runbooks"), "deploy") is None, "eve is not in apollo"
    assert eve.get(("agent", "eve"), "hello") is not None
    assert bob.get(("agent", "eve"), "hello") is None

    # Only an owner deletes: bob's delete of alice's item is refused.
    with pytest.raises(amos.RefusedError):
        bob.delete(("team", "apollo", "runbooks"), "deploy")
    # bob's put under the same key writes bob's own copy; the newer is read.
    bob.put(("team", "apollo", "runbooks"), "deploy", {"text": "deploys moved to wednesdays"})
    assert alice.get(("team", "apollo", "runbooks"), "deploy").value["text"] == "deploys moved to wednesdays"

    assert alice.list_namespaces() == [("agent", "eve"), ("prefs",), ("team", "apollo", "runbooks")]
    assert bob.list_namespaces() == [("team", "apollo", "runbooks")]
    assert alice.list_namespaces(prefix=("team",), max_depth=2) == [("team", "apollo")]
    assert alice.list_namespaces(suffix=("runbooks",)) == [("team", "apollo", "runbooks")]


def test_search_is_gated_recall_for_the_agent(home):
    alice = AmosStore(home.path, "alice", mode="lexical")
    bob = AmosStore(home.path, "bob", mode="lexical")
    alice.put(("team", "apollo"), "a", {"text": "the payroll desk fixes wrong paychecks", "kind": "howto"})
    alice.put(("team", "apollo"), "b", {"text": "payroll runs on the last friday", "kind": "fact"})
    alice.put(("diary",), "c", {"text": "my payroll complaint is private"})
    alice.put(("team", "apollo", "old"), "d", {"text": "payroll used to run weekly", "kind": "fact"})

    hits = bob.search(("team", "apollo"), query="payroll")
    assert sorted(h.key for h in hits) == ["a", "b", "d"], "never alice's diary"
    assert all(h.score is not None and h.score > 0 for h in hits)
    assert sorted(h.key for h in alice.search((), query="payroll")) == ["a", "b", "c", "d"]
    assert [h.key for h in bob.search(("team", "apollo", "old"), query="payroll")] == ["d"]
    assert sorted(h.key for h in bob.search(("team",), query="payroll", filter={"kind": "fact"})) == ["b", "d"]
    assert [h.key for h in bob.search(("team",), query="payroll", filter={"kind": {"$ne": "fact"}})] == ["a"]
    assert len(bob.search(("team",), query="payroll", limit=2)) == 2
    assert len(bob.search(("team",), query="payroll", limit=2, offset=2)) == 1

    # Without a query: every visible item under the prefix, newest first.
    listed = bob.search(("team", "apollo"))
    assert [h.key for h in listed] == ["d", "b", "a"]
    assert all(h.score is None for h in listed)
    assert [h.key for h in bob.search(("diary",))] == []


def test_a_langgraph_graph_keeps_memory_in_amos(home):
    """A real StateGraph compiled with the store: one node remembers, the
    next recalls; the memory is an amos memory the CLI finds."""

    class State(TypedDict):
        fact: str
        recalled: list

    def remember(state: State, *, store: BaseStore) -> dict:
        store.put(("team", "apollo", "facts"), "f1", {"text": state["fact"]})
        return {}

    def recall(state: State, *, store: BaseStore) -> dict:
        hits = store.search(("team", "apollo"), query="release freeze")
        return {"recalled": [h.value["text"] for h in hits]}

    g = StateGraph(State)
    g.add_node("remember", remember)
    g.add_node("recall", recall)
    g.add_edge(START, "remember")
    g.add_edge("remember", "recall")
    g.add_edge("recall", END)
    graph = g.compile(store=AmosStore(home.path, "alice", mode="lexical"))

    out = graph.invoke({"fact": "the release freeze starts on the 20th", "recalled": []})
    assert out["recalled"] == ["the release freeze starts on the 20th"]
    cli = home.json("search", "release freeze", "--as", "bob", "--mode", "lexical")["hits"]
    assert len(cli) == 1 and "release freeze" in cli[0]["content"]


def test_async_batch(home):
    store = AmosStore(home.path, "alice")

    async def go():
        await store.aput(("n",), "k", {"text": "async works"})
        return await store.aget(("n",), "k")

    assert asyncio.run(go()).value == {"text": "async works"}


def test_an_unknown_agent_fails_at_once(home):
    with pytest.raises(amos.UnknownNameError):
        AmosStore(home.path, "mallory")
