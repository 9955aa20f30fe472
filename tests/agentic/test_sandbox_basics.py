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
    m = T.ToolManager([S.PythonTool(S.SandboxLimits(timeout_s=2))], timeout_s=10)
    assert m.run(T.ToolCall("python", {"code": "print(2 ** 10)"})) == T.Observation("[exit status 0]\n1024\n")
    assert m.run(T.ToolCall("python", {"code": "while True: pass"})).error == "tool_timeout"
    failed = m.run(T.ToolCall("python", {"code": "print('exit status 0')\n1/0"}))
    assert failed.error is None and failed.text.startswith("[exit status 1]\n") and "ZeroDivisionError" in failed.text
    killed = m.run(T.ToolCall("python", {"code": "import os\nprint('\\x1b]0;title\\x07hi', flush=True)\nos.kill(os.getpid(), 9)"}))
    assert killed.text == "[killed by SIGKILL]\nhi\n\n[stderr]\n"  # named signal first; the OSC sequence gone


# --- pieces that need no sandbox ----------------------------------------------------------------------

def test_exit_status_in_words():
    assert [S.describe_exit(c) for c in (0, 3, -9, 137, -15, 143)] == [
        "exit status 0", "exit status 3", "killed by SIGKILL", "killed by SIGKILL", "killed by SIGTERM", "killed by SIGTERM"]
    r = S.SandboxResult("", "", -9, True, 1.0)
    assert r.status == "timed out, then killed by SIGKILL"


def test_limits_share_memory_so_the_sum_stays_under_the_bound():
    for memory, processes, disk in ((1024, 16, 16), (600, 4, 50), (2048, 7, 3)):
        lim = S.SandboxLimits(memory_mb=memory, processes=processes, disk_mb=disk)
        assert lim.processes * lim.process_share_mb + lim.tmpfs_mb <= lim.memory_mb
        assert lim.processes * (lim.process_share_mb + 1) + lim.tmpfs_mb > lim.memory_mb  # the largest share that fits
    with pytest.raises(ValueError, match="interpreter needs 32"):
        S.SandboxLimits(memory_mb=512, processes=16)
    assert S.SandboxLimits().memory_mb <= 1024


def _bpf_verdict(prog: bytes, nr: int, arch: int, arg0: int = 0) -> str:
    """An interpreter of classic BPF written from the kernel's definitions (LD ABS, JEQ/JGE/JSET K, RET K)."""
    import struct
    ins = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    data = struct.pack("=iI", nr, arch) + bytes(8) + struct.pack("=Q", arg0) + bytes(40)  # struct seccomp_data
    pc, acc = 0, 0
    for _ in range(len(ins)):
        code, jt, jf, k = ins[pc]
        cls = code & 0x07
        if cls == 0x00:  # BPF_LD
            assert code == 0x20, code  # W | ABS only
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif cls == 0x06:  # BPF_RET
            action = k & 0xFFFF0000
            return {0x7FFF0000: "allow", 0x80000000: "kill_process", 0x00050000: f"errno {k & 0xFFFF}"}[action]
        else:
            assert cls == 0x05, code  # BPF_JMP with K
            op = code & 0xF0
            taken = {0x10: acc == k, 0x30: acc >= k, 0x40: bool(acc & k)}[op]
            pc += 1 + (jt if taken else jf)
    raise AssertionError("the program fell off its end")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_seccomp_program_denies_exactly_what_it_lists(machine):
    nr, arch = S._SYSCALLS[machine], S._AUDIT_ARCH[machine]
    deny = S.DENIED + S.DENIED_WITHOUT_CGROUP
    prog = S.seccomp_filter(machine, deny)
    assert len(prog) % 8 == 0 and len(prog) // 8 < 256
    for name in deny:
        assert _bpf_verdict(prog, nr[name], arch) == "errno 1", name
    allowed = set(range(0, 460)) - {nr[n] for n in deny} - {nr["clone3"]}
    assert all(_bpf_verdict(prog, n, arch) == "allow" for n in sorted(allowed))
    assert _bpf_verdict(prog, nr["clone3"], arch) == "errno 38"  # ENOSYS: libc falls back to clone
    assert _bpf_verdict(prog, nr["clone"], arch, 0x01200011) == "allow"  # what fork() passes
    for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        assert _bpf_verdict(prog, nr["clone"], arch, 0x01200011 | flag) == "errno 1", hex(flag)
    assert _bpf_verdict(prog, 1, 0x40000003) == "kill_process"  # i386 on this filter: another arch
    if machine == "x86_64":
        assert _bpf_verdict(prog, 0x40000000 + 1, arch) == "errno 1"  # the x32 ABI
    memfd_ok = S.seccomp_filter(machine, S.DENIED)
    assert _bpf_verdict(memfd_ok, nr["memfd_create"], arch) == "allow"  # with a cgroup, memfd is counted, not refused
    with pytest.raises(S.SandboxUnavailable, match="no seccomp filter"):
        S.seccomp_filter("riscv64")


@needs_sandbox
def test_a_cgroup_when_one_can_be_made_is_written_and_used(monkeypatch, tmp_path):
    """The cgroup path's plumbing, on a stand-in directory (this host's cgroup v2 may hand out no memory
    controller): the limits are written, the gate's pid lands in cgroup.procs before it runs anything, the
    result says "cgroup", and memfd is no longer refused (memory.max counts it instead)."""
    monkeypatch.setattr(S._Cgroup, "parent", staticmethod(lambda: str(tmp_path)))
    monkeypatch.setattr(S._Cgroup, "remove", lambda self: None)
    r = S.run_code("import os\nfd = os.memfd_create('x')\nos.write(fd, b'abc')\nprint(os.getpid())", FAST)
    (group,) = list(tmp_path.iterdir())
    assert r.memory == "cgroup" and r.returncode == 0, r.stderr
    assert (group / "memory.max").read_text() == str(FAST.memory_mb << 20)
    assert (group / "pids.max").read_text() == str(FAST.processes + 2)
    assert int((group / "cgroup.procs").read_text()) > 0 and (group / "cgroup.kill").read_text() == "1"


@needs_sandbox
def test_the_result_says_which_backend_and_which_memory_bound_ran():
    r = S.run_code("pass", FAST)
    assert r.backend == ("bubblewrap" if S.find_bwrap() else "namespaces")
    assert r.memory in ("cgroup", "rlimit") and (r.memory == "rlimit" or S._Cgroup.parent() is not None)
    assert S.run_code("pass", FAST, backend="namespaces").backend == "namespaces"
