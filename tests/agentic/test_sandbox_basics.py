"""Tests for tunix_lit.agentic.sandbox, one behaviour each: output, no network, the limits, the wall clock, the
code tool (the hostile programs, as root and as an ordinary user on both backends, are in test_sandbox.py)."""
import os
import socket
import time

import pytest

from tunix_lit.agentic import sandbox as S
from tunix_lit.agentic import tools as T


# --- the sandbox -----------------------------------------------------------------------------------

FAST = S.SandboxLimits(timeout_s=5, cpu_s=5)


@pytest.fixture
def sandbox():
    """Skip with the reason on a host that cannot isolate code; under CI=true (.ci/run installs bubblewrap), fail."""
    problem = S.sandbox_problem()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: the code sandbox must work here, but {problem}")
        pytest.skip(f"this host cannot isolate code: {problem}")


needs_sandbox = pytest.mark.usefixtures("sandbox")


@needs_sandbox
def test_sandbox_runs_code_and_returns_its_output():
    r = S.run_code("print(6 * 7)", FAST)
    assert (r.stdout, r.returncode, r.timed_out) == ("42\n", 0, False)


@needs_sandbox
def test_sandbox_cannot_connect_to_the_hosts_loopback():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        host = socket.create_connection(("127.0.0.1", port), timeout=2)  # the port is reachable from outside
        server.accept()[0].close()
        host.close()
        r = S.run_code(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')", FAST)
        assert r.returncode != 0 and "connected" not in r.stdout
        assert "ConnectionRefusedError" in r.stderr or "unreachable" in r.stderr  # its own loopback, or none
        with pytest.raises(socket.timeout):
            server.accept()  # nothing arrived from the sandbox
    finally:
        server.close()


@needs_sandbox
def test_sandbox_cannot_resolve_names():
    r = S.run_code("import socket\nprint(socket.getaddrinfo('example.com', 80))", FAST)
    assert r.returncode != 0 and "gaierror" in r.stderr


@needs_sandbox
def test_sandbox_stops_a_fork_bomb_and_the_host_survives():
    """Children that wait until fork fails: the count it got is below the process limit, and not zero."""
    limits = S.SandboxLimits(timeout_s=5, processes=8)
    start = time.monotonic()
    r = S.run_code("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30)\n"
                   "        n += 1\nexcept OSError as e:\n    print(n, type(e).__name__)", limits)
    got, error = r.stdout.split()
    assert 1 <= int(got) < limits.processes and error == "BlockingIOError"  # EAGAIN: the limit, not a crash
    assert not r.timed_out and time.monotonic() - start < 5  # its sleeping children died with it
    assert S.run_code("print('alive')", FAST).stdout == "alive\n"


@needs_sandbox
def test_sandbox_stops_a_10_gb_allocation_and_the_host_survives():
    r = S.run_code("x = bytearray(10 * 2**30)\nprint('allocated')", FAST)
    assert r.returncode != 0 and "MemoryError" in r.stderr and "allocated" not in r.stdout
    assert S.run_code("print('alive')", FAST).stdout == "alive\n"


@needs_sandbox
def test_sandbox_kills_at_the_wall_clock():
    start = time.monotonic()
    r = S.run_code("import time\ntime.sleep(30)", S.SandboxLimits(timeout_s=1))
    assert r.timed_out and r.returncode < 0 and time.monotonic() - start < 5


@needs_sandbox
def test_a_process_that_leaves_its_group_dies_with_the_run():
    """A grandchild in its own session holding stdout open would keep a plain subprocess alive for 60 s."""
    start = time.monotonic()
    r = S.run_code("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent done')", FAST)
    assert r.stdout == "parent done\n" and not r.timed_out and time.monotonic() - start < 4
    start = time.monotonic()
    r = S.run_code("import os, time\nos.setsid()\nif os.fork() == 0:\n    time.sleep(60)\ntime.sleep(60)",
                   S.SandboxLimits(timeout_s=1))
    assert r.timed_out and time.monotonic() - start < 4


@needs_sandbox
def test_sandbox_cpu_and_file_limits():
    r = S.run_code("while True: pass", S.SandboxLimits(timeout_s=10, cpu_s=1))
    assert not r.timed_out and r.returncode < 0  # killed by the CPU limit before the wall clock
    r = S.run_code("open('big', 'wb').write(b'x' * (3 << 20))", S.SandboxLimits(file_mb=1))
    assert r.returncode != 0 and "File too large" in r.stderr


@needs_sandbox
def test_sandbox_environment_holds_only_home_and_its_files_are_thrown_away(monkeypatch):
    monkeypatch.setenv("TUNIX_LIT_TEST_SECRET", "do-not-leak")
    r = S.run_code("import os\nprint(os.listdir('.'))\nopen('note', 'w').write('x')\nprint(os.getcwd())\n"
                   "print(sorted(os.environ))", FAST)
    listing, cwd, env = r.stdout.splitlines()
    assert listing == "['main.py']" and cwd == "/tmp"
    assert "HOME" in eval(env) and set(eval(env)) <= {"HOME", "PWD", "LC_CTYPE"}  # PWD: bubblewrap; LC_CTYPE: Python
    assert S.run_code("import os\nprint(os.listdir('.'))", FAST).stdout == "['main.py']\n"  # the note is gone


@needs_sandbox
def test_sandbox_fails_closed_when_bubblewrap_refuses(monkeypatch, tmp_path):
    """bubblewrap given an option it does not know exits before running anything: SandboxUnavailable, no run."""
    if S.find_bwrap() is None:
        pytest.skip("bubblewrap is not installed; the namespaces case is tested in test_sandbox.py")
    build = S._bwrap_command
    monkeypatch.setattr(S, "_bwrap_command", lambda *a: build(*a)[:1] + ["--no-such-option"] + build(*a)[1:])
    marker = tmp_path / "ran"
    with pytest.raises(S.SandboxUnavailable, match="bubblewrap.*could not be set up.*no-such-option"):
        S.run_code(f"open({str(marker)!r}, 'w').write('x')", FAST)
    assert not marker.exists()


@needs_sandbox
def test_python_tool_timeout_is_a_tool_timeout_observation():
    m = T.ToolManager([S.PythonTool(S.SandboxLimits(timeout_s=0.5))], timeout_s=5)
    assert m.run(T.ToolCall("python", {"code": "print(2 ** 10)"})) == T.Observation("1024\n")
    assert m.run(T.ToolCall("python", {"code": "while True: pass"})).error == "tool_timeout"
    failed = m.run(T.ToolCall("python", {"code": "1/0"}))
    assert failed.error is None and "ZeroDivisionError" in failed.text and "exit status 1" in failed.text
