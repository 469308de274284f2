"""MCP over Streamable HTTP with the official MCP Python SDK (PyPI `mcp`,
pinned in .ci/run) against `amos serve --http`, run by the `http_mcp` test:

    python3 http_mcp_client.py URL ALICE_TOKEN BOB_TOKEN

alice and bob are in team apollo. Exits 0 when every check holds, 1 with
the failed check on stderr, and 77 when the SDK is not installed.
"""

import asyncio
import contextlib
import sys

try:
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
except ImportError as e:  # the Rust test skips, loudly
    print(f"the MCP Python SDK is missing: {e}", file=sys.stderr)
    sys.exit(77)


@contextlib.asynccontextmanager
async def connect(url, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx.Timeout(30, read=60)
    async with httpx.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, _):
            async with ClientSession(read, write) as c:
                await c.initialize()
                yield c


def text(r):
    return " ".join(getattr(b, "text", "") for b in r.content)


async def call(c, tool, args):
    return await c.call_tool(tool, args)


async def main(url, alice, bob):
    checks = 0
    async with connect(url, alice) as a:
        tools = [t.name for t in (await a.list_tools()).tools]
        assert "memory_search" in tools and "memory_add" in tools, tools
        r = await call(
            a, "memory_add", {"content": "zebra zebra zebra: alice's private launch codes"}
        )
        assert not r.isError, text(r)
        private = r.structuredContent["id"]
        r = await call(
            a,
            "memory_add",
            {"content": "a zebra crossing near the launch pad", "share": ["team:apollo"]},
        )
        team = r.structuredContent["id"]
        r = await call(a, "memory_get", {"id": private})
        assert not r.isError and r.structuredContent["owner"] == "alice", text(r)
        checks += 3

    async with connect(url, bob) as b:
        # Every tool that names alice's private memory: as missing.
        for tool, args in [
            ("memory_get", {"id": private}),
            ("memory_update", {"id": private, "content": "x"}),
            ("memory_share", {"id": private, "scope": "global"}),
            ("memory_unshare", {"id": private, "scope": "team:apollo"}),
            ("memory_forget", {"id": private}),
            ("memory_link", {"a": team, "b": private}),
            ("memory_feedback", {"ids": [private], "helpful": True}),
        ]:
            r = await call(b, tool, args)
            assert r.isError, f"{tool}: {text(r)}"
            assert text(r) == f"no such memory: {private}", f"{tool}: {text(r)}"
            checks += 1
        # Search, pack and timeline never hold, count or rank it.
        r = await call(b, "memory_search", {"query": "zebra", "mode": "lexical"})
        hits = r.structuredContent["hits"]
        assert [h["id"] for h in hits] == [team], hits
        assert hits[0]["explain"]["lexical_rank"] == 1, hits[0]["explain"]
        for tool, args in [
            ("memory_search", {"query": "zebra launch codes"}),
            ("memory_context_pack", {"query": "zebra launch codes", "report": True}),
            ("memory_timeline", {}),
        ]:
            r = await call(b, tool, args)
            assert not r.isError, f"{tool}: {text(r)}"
            seen = f"{r.structuredContent} {text(r)}"
            assert private not in seen and "private launch codes" not in seen, f"{tool}: {seen}"
            checks += 1
        # As resources too: not listed, and read as missing.
        listed = [str(r.uri) for r in (await b.list_resources()).resources]
        assert f"amos://memory/{team}" in listed and not any(private in u for u in listed), listed
        try:
            await b.read_resource(f"amos://memory/{private}")
        except Exception as e:
            assert "no such memory" in str(e), str(e)
        else:
            raise AssertionError("bob read alice's private memory as a resource")
        checks += 2
        # What bob's token adds is bob's.
        r = await call(b, "memory_add", {"content": "bob's own note"})
        r = await call(b, "memory_get", {"id": r.structuredContent["id"]})
        assert r.structuredContent["owner"] == "bob", text(r)
        checks += 2

    # Without a token, or with a wrong one, there is no session at all.
    for token in [None, "amos_0000000000000000_" + "0" * 64]:
        try:
            async with connect(url, token) as c:
                await c.list_tools()
        except BaseException as e:  # the SDK raises an exception group
            checks += 1
            continue
        raise AssertionError(f"connected with token {token!r}")
    print(f"ok: {checks} checks")


if __name__ == "__main__":
    try:
        asyncio.run(main(*sys.argv[1:4]))
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
