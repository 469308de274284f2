"""amos.Node opens the same home as a running ``amos serve`` (SQLite in WAL
mode): a write through Python is seen by the CLI and a write through the
CLI by the open Python node, while serve runs and keeps running."""

from __future__ import annotations

import amos


def test_python_and_the_cli_share_a_served_home(home, serve):
    node = amos.Node(home.path)  # opened while serve holds the home

    mid = node.add("the staging database moves to rack nine", as_="alice", share="team:apollo")
    cli = home.json("search", "staging rack", "--as", "bob", "--mode", "lexical")["hits"]
    assert [h["id"] for h in cli] == [mid]
    assert home.json("get", mid, "--as", "bob")["content"] == "the staging database moves to rack nine"

    other = home.json("add", "the backup window is at midnight", "--as", "bob",
                      "--share", "team:apollo")["id"]
    # The same open node sees it on its next call: no reopen.
    assert [h["id"] for h in node.search("backup window midnight", as_="alice", mode="lexical")] == [other]
    assert node.get(other, as_="alice")["owner"] == "bob"

    node.forget(mid, as_="alice")
    assert home.json("search", "staging rack", "--as", "bob", "--mode", "lexical")["hits"] == []

    status = home.json("status")
    assert status["memories"] >= 1
    assert serve.running(), "serve stopped:\n" + "".join(serve.log)
