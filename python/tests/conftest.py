"""Shared fixtures: throw-away amos homes set up with the real ``amos``
binary (``AMOS_BIN``, else the workspace's target/debug/amos, else ``amos``
on PATH), and a running ``amos serve`` on loopback.

Nothing here reaches the network or loads a model from outside: the built-in
static encoder ships in the binary and the extension.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import threading

import pytest

# CrewAI (tests/test_crewai.py) sends no telemetry and keeps no trace: no
# network, and no five-second wait per memory flow run outside a crew.
for _flag, _value in {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_SDK_DISABLED": "true",
}.items():
    os.environ.setdefault(_flag, _value)

REPO = pathlib.Path(__file__).resolve().parents[2]


def amos_bin() -> str:
    """The amos binary the tests drive."""
    env = os.environ.get("AMOS_BIN")
    if env:
        return env
    built = REPO / "target" / "debug" / "amos"
    if built.exists():
        return str(built)
    found = shutil.which("amos")
    if found is None:
        pytest.fail("no amos binary: set AMOS_BIN or build it (cargo build -p amos-node)")
    return found


class Home:
    """An initialised amos home in a temp directory, driven by the CLI."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.run("init", "--name", "py-test")

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["AMOS_HOME"] = str(self.path)
        env["AMOS_LOG"] = "warn"
        env.pop("AMOS_AGENT", None)
        return env

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``amos ARGS`` on this home (exit 0 required unless ``check=False``)."""
        r = subprocess.run(
            [amos_bin(), *args],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and r.returncode != 0:
            raise AssertionError(f"amos {args} exited {r.returncode}: {r.stderr}")
        return r

    def json(self, *args: str) -> object:
        """``amos --json ARGS``, parsed."""
        return json.loads(self.run("--json", *args).stdout)


@pytest.fixture
def home(tmp_path: pathlib.Path) -> Home:
    """A fresh home with team ``apollo`` (alice, bob) and ``eve`` in no team."""
    h = Home(tmp_path / "home")
    h.run("team", "create", "apollo")
    h.run("agent", "add", "alice", "--team", "apollo")
    h.run("agent", "add", "bob", "--team", "apollo")
    h.run("agent", "add", "eve")
    return h


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """``amos serve --no-mdns`` on 127.0.0.1, ready once it logs
    "listening on"; stopped with SIGTERM."""

    def __init__(self, home: Home) -> None:
        env = home.env()
        env["AMOS_LOG"] = "info"
        self.proc = subprocess.Popen(
            [amos_bin(), "serve", "--listen", f"127.0.0.1:{free_port()}", "--no-mdns"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log: list[str] = []
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                if "listening on" in line:
                    ready.set()
            ready.set()  # exited: stop waiting

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or self.proc.poll() is not None:
            self.stop()
            raise AssertionError("amos serve did not start:\n" + "".join(self.log))

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def serve(home: Home):
    s = Serve(home)
    yield s
    s.stop()
