"""amos.Node: the CLI's memory and recall commands from Python, with the
same fields, the same answers and the same exit codes."""

from __future__ import annotations

import pathlib

import pytest

import amos


def test_add_then_search_gives_the_cli_json_fields(home):
    node = amos.Node(home.path)
    mid = node.add("we deploy on tuesdays", as_="alice", share="team:apollo", type="procedure")
    assert isinstance(mid, str) and mid
    hits = node.search("deploy tuesdays", as_="bob", mode="lexical")
    assert [h["id"] for h in hits] == [mid]
    hit = hits[0]
    assert hit["content"] == "we deploy on tuesdays"
    assert isinstance(hit["score"], float) and hit["score"] > 0
    cli = home.json("search", "deploy tuesdays", "--as", "bob", "--mode", "lexical")["hits"]
    assert [h["id"] for h in cli] == [mid]
    assert set(hit) == set(cli[0]), "the Python dict has exactly the CLI's fields"
    # Every field the CLI prints, equal and of the same type, but those a
    # second recall moments later may score differently.
    for field in set(cli[0]) - {"score", "relevance", "explain"}:
        assert hit[field] == cli[0][field] and type(hit[field]) is type(cli[0][field]), field
    assert set(hit["explain"]) == set(cli[0]["explain"])
    assert all(type(hit["explain"][k]) is type(v) for k, v in cli[0]["explain"].items())
    assert hit["pinned"] is False and hit["archived"] is False and hit["expires"] is None
    assert hit["type"] == "procedure"
    assert hit["visibility"] == ["team:apollo"]


def test_add_takes_every_option_the_cli_takes(home):
    node = amos.Node(home.path)
    old = node.add("the vpn lives on port 1194", as_="alice", valid_from="2025-01-01")
    new = node.add(
        "the vpn lives on port 443",
        as_="alice",
        share=["team:apollo", "agent:eve"],
        type="fact",
        tags=["net", "vpn"],
        importance=0.9,
        pin=True,
        expires="30d",
        valid_from="2026-01-01",
        supersedes=old,
    )
    got = node.get(new, as_="alice")
    assert got == home.json("get", new, "--as", "alice")
    assert got["supersedes"] == old
    assert got["valid_from"] == "2026-01-01T00:00:00.000Z"
    assert sorted(got["visibility"]) == ["agent:eve", "team:apollo"]
    assert got["tags"] == ["net", "vpn"] and got["pinned"] is True
    assert got["expires"] is not None and got["importance"] == pytest.approx(0.9)


def test_valid_at_sees_what_was_true_then(home):
    node = amos.Node(home.path)
    old = node.add("standup is at nine", as_="alice", valid_from="2025-01-01")
    new = node.add("standup is at ten", as_="alice", valid_from="2026-01-01", supersedes=old)
    def ids(**kw):
        return [h["id"] for h in node.search("standup", as_="alice", mode="lexical", **kw)]
    assert ids(valid_at="2025-06-01") == [old]
    assert ids(valid_at="2026-06-01") == [new]
    assert sorted(ids()) == sorted([old, new])


def test_pack_get_timeline_forget(home):
    node = amos.Node(home.path)
    a = node.add("the release train leaves on fridays", as_="alice", share="team:apollo",
                 valid_from="2026-02-01")
    pack = node.pack("release train", as_="bob", budget=200, mode="lexical")
    assert [i["id"] for i in pack["items"]] == [a]
    assert pack["budget"] == 200 and 0 < pack["tokens"] <= 200
    assert "report" not in pack and "report" in node.pack("release", as_="bob", report=True)
    assert node.get(a, as_="bob")["content"] == "the release train leaves on fridays"
    events = node.timeline(as_="bob")
    assert events == home.json("timeline", "--as", "bob")["events"]
    assert [(e["memory"], e["event"]) for e in events] == [(a, "starts")]
    assert node.timeline(as_="bob", since="2026-03-01") == []
    assert node.forget(a, as_="alice") == a
    with pytest.raises(amos.NoSuchMemoryError) as e:
        node.get(a, as_="bob")
    assert e.value.exit_code == 2
    assert node.search("release train", as_="alice", mode="lexical") == []


def test_list_and_update(home):
    node = amos.Node(home.path)
    a = node.add("lunch is at noon", as_="alice", type="fact")
    node.add("a note", as_="alice")
    assert [m["id"] for m in node.list(as_="alice", type="fact")] == [a]
    assert node.update(a, "lunch is at one", as_="alice") == a
    assert node.get(a, as_="alice")["content"] == "lunch is at one"
    assert len(node.list(as_="alice", limit=1)) == 1


def cli_code(home, *args):
    return home.run(*args, check=False).returncode


def test_errors_carry_the_cli_exit_codes(home, tmp_path: pathlib.Path):
    with pytest.raises(amos.NotAHomeError) as e:
        amos.Node(tmp_path / "nowhere")
    assert e.value.exit_code == 2 and "amos init" in str(e.value)

    node = amos.Node(home.path)
    with pytest.raises(amos.UnknownNameError) as e:
        node.search("x", as_="zed")
    assert (e.value.kind, e.value.name, e.value.exit_code) == ("agent", "zed", 2)
    assert e.value.exit_code == cli_code(home, "search", "x", "--as", "zed")

    with pytest.raises(amos.BadInputError) as e:
        node.add("x", as_="alice", share="teem:apollo")
    assert e.value.exit_code == 2 == cli_code(home, "add", "x", "--as", "alice", "--share", "teem:apollo")

    with pytest.raises(amos.BadInputError) as e:
        node.search("x", as_="alice", valid_at="7d")
    assert str(e.value) == "valid_at 7d: a time is needed; did you mean -7d (7 days ago)?"

    with pytest.raises(amos.BadInputError) as e:
        node.search("x", as_="alice", mode="fuzzy")
    assert e.value.exit_code == 2 and "fuzzy" in str(e.value)

    shared = node.add("team rule", as_="alice", share="team:apollo")
    with pytest.raises(amos.RefusedError) as e:
        node.forget(shared, as_="bob")
    assert e.value.rule == "not_owner"
    assert e.value.exit_code == 3 == cli_code(home, "forget", shared, "--as", "bob")
    assert node.get(shared, as_="alice")["content"] == "team rule", "nothing changed"

    with pytest.raises(amos.AmosError):  # every one is an AmosError
        node.get("not-an-id", as_="alice")
    assert issubclass(amos.RefusedError, PermissionError)
    assert issubclass(amos.BadInputError, ValueError)
