"""The attack test (issue 41 item 8): through the Python API one agent never
reads, counts or ranks another agent's private memory — search in every
mode, get, pack and timeline. ``as_`` is the requester exactly as the CLI's
``--as``."""

from __future__ import annotations

import pytest

import amos

MODES = ["hybrid", "lexical", "semantic", "fast"]
SECRET = "the payroll vault password is hunter2 payroll"


def view(node, who):
    """Everything ``who`` gets back about payroll, minus what moves with the
    clock (score's freshness): ids in rank order, relevance, pack sizes,
    timeline events."""
    out = {}
    for mode in MODES:
        hits = node.search("payroll vault password", as_=who, mode=mode, k=50)
        out[mode] = [(h["id"], h["relevance"]) for h in hits]
        pack = node.pack("payroll vault password", as_=who, mode=mode, report=True)
        out["pack " + mode] = (
            [i["id"] for i in pack["items"]],
            pack["tokens"],
            pack["conflicts"],
            len(pack["report"]),
        )
    out["timeline"] = node.timeline(as_=who)
    out["list"] = [m["id"] for m in node.list(as_=who, limit=100)]
    return out


@pytest.mark.parametrize("who", ["bob", "eve"])
def test_another_agents_private_memory_never_reaches_a_result(home, who):
    node = amos.Node(home.path)
    node.add("payroll corrections go through the payroll desk", as_="alice", share="team:apollo")
    node.add("the vault is checked on mondays", as_="bob")
    node.add("eve keeps a payroll spreadsheet", as_="eve")
    before = view(node, who)

    secret = node.add(SECRET, as_="alice")  # private: alice alone
    node.add("payroll vault password rotation every month", as_="alice")

    after = view(node, who)
    assert after == before, "an invisible memory moved what the requester gets"
    for got in after.values():
        assert secret not in repr(got)
    # The owner does see it: the probe works.
    assert secret in [h["id"] for h in node.search("payroll vault password", as_="alice", mode="lexical")]

    # get: invisible and missing are the one answer.
    with pytest.raises(amos.NoSuchMemoryError) as hidden:
        node.get(secret, as_=who)
    missing = "0" * len(secret)
    with pytest.raises(amos.NoSuchMemoryError) as absent:
        node.get(missing, as_=who)
    assert hidden.value.exit_code == absent.value.exit_code == 2
    assert str(hidden.value).replace(secret, "ID") == str(absent.value).replace(missing, "ID")
    assert home.run("get", secret, "--as", who, check=False).returncode == hidden.value.exit_code

    # Nor can it be forgotten or edited by another.
    with pytest.raises(amos.AmosError):
        node.forget(secret, as_=who)
    with pytest.raises(amos.AmosError):
        node.update(secret, "owned", as_=who)
    assert node.get(secret, as_="alice")["content"] == SECRET


def test_the_requester_is_as_not_anyone_else(home):
    """A team memory reaches team members only; the same call as ``eve``
    gets nothing, and an unregistered name is refused, not made."""
    node = amos.Node(home.path)
    mid = node.add("apollo ships on thursdays", as_="alice", share="team:apollo")
    assert [h["id"] for h in node.search("apollo ships", as_="bob", mode="lexical")] == [mid]
    assert node.search("apollo ships", as_="eve", mode="lexical") == []
    with pytest.raises(amos.UnknownNameError):
        node.search("apollo ships", as_="mallory")
