"""Hostile programs against the code sandbox: run as root and as an ordinary user, through bubblewrap and
through our own namespaces. Every target is left open by the host's permissions (a world-readable token,
world-writable directories), so only the sandbox stands between the program and it."""
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from tunix_lit.agentic import sandbox as T

CI = os.environ.get("CI") == "true"
pytestmark = pytest.mark.xdist_group("sandbox")  # one worker builds each module-scoped attack report once
LIMITS = T.SandboxLimits(timeout_s=8, cpu_s=5, memory_mb=1024, file_mb=8, disk_mb=16, processes=16, output_chars=10**6)
TAG = f"tl-surv-{os.getpid() % 100000}"  # the name (PR_SET_NAME, 15 bytes at most) an escaping program takes: ours alone
SECRET = "hf_tunix_lit_SECRET_TOKEN"
MARKER = "tunix-lit-caller-marker"

# The caller: runs as the identity under test, loads sandbox.py from a copy (its one import of the package,
# chapter 50's ToolTimeout, is stubbed), sets up the victims and runs every probe.
CALLER = r'''
import importlib.util, json, os, socket, subprocess, sys, time, types
for name in ("tunix_lit", "tunix_lit.agentic", "tunix_lit.agentic.tools"):  # the copy's one import of the package
    sys.modules[name] = types.ModuleType(name)
sys.modules["tunix_lit.agentic.tools"].ToolTimeout = type("ToolTimeout", (Exception,), {})
sys.modules["tunix_lit.agentic.tools"].clean_text = str
spec = importlib.util.spec_from_file_location("tunix_lit.agentic.sandbox", sys.argv[1])
T = importlib.util.module_from_spec(spec)
spec.loader.exec_module(T)
job = json.load(sys.stdin)
victim = subprocess.Popen(["sleep", "120"])
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(8)
socket.create_connection(("127.0.0.1", server.getsockname()[1]), timeout=2).close()  # reachable from here
server.accept()[0].close()
import ctypes, platform
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(platform.machine(), (None, None))
libc = ctypes.CDLL(None, use_errno=True)  # a secret in the caller's session keyring, which children inherit
key = libc.syscall(ADD_KEY, b"user", b"tunix_lit_probe", job["secret_text"].encode(), len(job["secret_text"]),
                   ctypes.c_int(-3)) if ADD_KEY else -1
values = {"@PTRACE@": str(job["ptrace"]), "@VMREAD@": str(job["vmread"]), "@KEYCTL@": str(KEYCTL), "@VICTIM@": str(victim.pid), "@CALLER@": str(os.getpid()), "@PORT@": str(server.getsockname()[1])}
limits = T.SandboxLimits(**job["limits"])
as_sandbox = dict(user=65534, group=65534, extra_groups=[]) if os.getuid() == 0 else {}  # who runs the code
control = subprocess.run(["cat", job["secret"]], capture_output=True, text=True, **as_sandbox).stdout
out = {"uid": os.getuid(), "control_read": control, "probes": {}, "key_added": key > 0}
for name, code in job["probes"].items():
    for k, v in values.items():
        code = code.replace(k, v)
    r = T.run_code(code, limits, backend=job["backend"])
    out["probes"][name] = {"stdout": r.stdout, "stderr": r.stderr, "returncode": r.returncode, "timed_out": r.timed_out}
def tagged():
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            found += [int(p)] if open("/proc/%s/comm" % p).read().strip() == job["tag"] else []
        except OSError:
            pass
    return found
out["survivors"] = {}
for way in ("every kill", "only PID 1's kill"):
    if way != "every kill":
        T._kill_group = lambda pid: None  # the gate's group is left alone: PID 1's kill must do it all
    r = T.run_code(job["escape"], T.SandboxLimits(timeout_s=1), backend=job["backend"])
    at_return = tagged()
    time.sleep(0.5)
    out["survivors"][way] = {"printed": r.stdout, "status": r.status, "at_return": at_return, "after": tagged()}
out["memory_mechanism"] = r.memory
server.settimeout(0.3)
try:
    server.accept()
    out["connection_arrived"] = True
except socket.timeout:
    out["connection_arrived"] = False
out["victim_alive"] = victim.poll() is None
victim.kill()
out["alive_after"] = T.run_code("print('alive')", limits, backend=job["backend"]).stdout
print(json.dumps(out))
'''
# Leaves its session and process group three times over, names every process TAG, and sleeps past any clock.
ESCAPE = ("import ctypes, os, time\nlibc = ctypes.CDLL(None)\nfor _ in range(3):\n    if os.fork() == 0:\n"
          "        os.setsid()\n        if os.fork() == 0:\n            libc.prctl(15, b'" + TAG + "', 0, 0, 0)\n"
          "            time.sleep(60)\n        os._exit(0)\nlibc.prctl(15, b'" + TAG + "', 0, 0, 0)\n"
          "print('running', flush=True)\ntime.sleep(60)")

# Holds all the memory it can at once: every tmpfs filled, a 1 GiB memfd, children allocating until they cannot.
HOLD = r"""
import os, time
def fill(path):
    n = 0
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"x" * 2**20); f.flush(); n += 1
    except OSError:
        return n
held = sum(fill("%s/fill%d" % (d, i)) for d in ("/tmp", "/dev/shm", os.path.expanduser("~")) for i in range(3))
try:
    fd = os.memfd_create("hold"); os.posix_fallocate(fd, 0, 1 << 30); held += 1024; memfd = "held"
except OSError as e:
    memfd = type(e).__name__
r, w = os.pipe()
for _ in range(64):
    try:
        if os.fork() == 0:
            chunks = []
            try:
                while True:
                    chunks.append(bytearray(4 << 20))
            except MemoryError:
                os.write(w, b"%d " % (4 * len(chunks))); time.sleep(30)
    except OSError:
        break
time.sleep(1.0)
os.close(w)
print(held + sum(int(x) for x in os.read(r, 1 << 16).split()), memfd)
"""

# Each denied syscall, called with arguments that would do nothing harmful if the filter let it through.
SECCOMP = ("import ctypes, json, os, platform\nlibc = ctypes.CDLL(None, use_errno=True)\nnr = json.loads(%r)\nout = {}\n"
           "for name, n in nr.items():\n    ctypes.set_errno(0)\n    r = libc.syscall(n, 0, 0, 0, 0, 0, 0)\n"
           "    out[name] = (r, ctypes.get_errno())\nprint(json.dumps(out))")


TRY = "def attempt(f):\n    try:\n        return f()\n    except BaseException as e:\n        return type(e).__name__\n"


def probes(lab: dict) -> dict:
    """Each hostile program; @NAME@ marks values only the caller knows (its PID, its victim's, its port)."""
    targets = [lab["home"], lab["ckpt"], lab["pkg"], os.path.dirname(T.__file__)]
    return {
        "read_secret": TRY + "import os\n" + f"print(attempt(lambda: open({lab['secret']!r}).read()))\n"
                             f"print(attempt(lambda: os.listdir({lab['home']!r})))\n"
                             "print(os.listdir(os.path.expanduser('~')), os.listdir('/'))",
        "write": TRY + "".join(f"print(attempt(lambda: open({os.path.join(d, 'pwned')!r}, 'w').write('x')))\n"
                               for d in targets),
        "processes": TRY + "import os\npids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
                           "print('pids', pids)\n"
                           "for p in pids:\n    print(p, repr(attempt(lambda: open(f'/proc/{p}/cmdline').read())))\n"
                           "for p in ('@CALLER@', os.getppid(), 1):\n"
                           "    print(p, attempt(lambda: open(f'/proc/{p}/cmdline').read()),"
                           " attempt(lambda: open(f'/proc/{p}/environ').read()))",
        "signal": TRY + "import os, signal\n"
                        "for p in (@VICTIM@, @CALLER@, os.getppid(), -1):\n"
                        "    print(p, attempt(lambda: os.kill(p, signal.SIGKILL)), flush=True)",
        # every process forks again: 2**12 wanted. The first process may finish its own forks before the others
        # fill the table (a loaded machine), so after a pause, while they still sleep, it counts and forks once more
        "fork_bomb": "import os, time\nroot, failed = os.getpid(), 0\nfor _ in range(12):\n    try:\n"
                     "        os.fork()\n    except OSError:\n        failed += 1\n"
                     "time.sleep(0.5 if os.getpid() == root else 2.0)\n"
                     "if os.getpid() == root:\n"
                     "    count = len([p for p in os.listdir('/proc') if p.isdigit()])\n"
                     "    try:\n        os.fork() or os._exit(0)\n    except OSError:\n        failed += 1\n"
                     "    print(count, failed)",
        "memory": TRY + "print(attempt(lambda: len(bytearray(16 * 2**20))))\n"
                        "print(attempt(lambda: len(bytearray(10 * 2**30))))",
        "disk": "import os\ntry:\n    open('/tmp/big', 'wb').write(b'x' * (12 << 20))\nexcept OSError as e:\n    print('big', e)\n"
                "os.remove('/tmp/big')\ndef fill(d):\n    n = 0\n    try:\n        while True:\n"
                "            with open(os.path.join(d, f'fill{n}'), 'wb') as f:\n                f.write(b'x' * 2**20)\n"
                "            n += 1\n    except OSError as e:\n        return n, type(e).__name__\n"
                "print({d: fill(d) for d in ('/tmp', os.path.expanduser('~'), '/dev/shm', '/', '/dev', '/usr')})",
        "keyring": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(256)\n"
                   "found = libc.syscall(@KEYCTL@, 10, ctypes.c_int(-3), b'user', b'tunix_lit_probe', 0)\n"
                   "print(found, libc.syscall(@KEYCTL@, 11, found, buf, 256), buf.value)\n"  # SEARCH, READ
                   "print(open('/proc/keys').read())",
        "nested_namespace": TRY + "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                                  "print(libc.unshare(0x10000000), libc.unshare(0x00020000))",  # CLONE_NEWUSER, CLONE_NEWNS
        "ptrace_pid1": "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                       "print(libc.syscall(@PTRACE@, 0x4206, 1, 0, 0), ctypes.get_errno())\n"  # PTRACE_SEIZE PID 1
                       "buf = ctypes.create_string_buffer(8)\n"
                       "iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)\n"
                       "print(libc.syscall(@VMREAD@, 1, iov, 1, iov, 1, 0), ctypes.get_errno())",  # process_vm_readv
        "seccomp": SECCOMP % json.dumps({n: T._SYSCALLS[os.uname().machine][n] for n in T.DENIED}),
        "privileges": "import os\nprint([l.split()[1] for l in open('/proc/self/status') if l.split()[0] in "
                      "('CapEff:', 'CapBnd:', 'CapPrm:', 'NoNewPrivs:', 'Seccomp:')])\n"
                      "print([l.strip() for l in open('/proc/self/cgroup') if l.startswith('0::')])",
        "masks": TRY + "import os, sys\n"
                       "for p in ('/proc/key-users', '/proc/keys', '/proc/loadavg', '/proc/meminfo'):\n"
                       "    print(p, repr(attempt(lambda: open(p).read())))\n"
                       "print('etc', os.listdir('/usr/local/etc') if os.path.isdir('/usr/local/etc') else [])\n"
                       "print('site', [p for p in sys.path if 'packages' in p and os.path.isdir(p) and os.listdir(p)])",
        "hold": HOLD,
        "network": TRY + "import socket\n"
                         "print('host', attempt(lambda: socket.create_connection(('127.0.0.1', @PORT@), timeout=2)))\n"
                         "print('dns', attempt(lambda: socket.getaddrinfo('example.com', 80)))\n"
                         "print('out', attempt(lambda: socket.create_connection(('1.1.1.1', 53), timeout=2)))\n"
                         "print('ifaces', socket.if_nameindex())",
    }


def _free_uid() -> int:
    """A uid with no account: an ordinary user who owns nothing on this host but what the test gives it."""
    uid = 47000
    while True:
        try:
            pwd.getpwuid(uid)
            uid += 1
        except KeyError:
            return uid


def _world_python() -> str:
    """A Python any user may run (ours, unless it lives in a private directory such as /root)."""
    for p in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(p) and T._world_runnable(p):
            return p
    pytest.fail("no world-executable Python for the ordinary-user caller") if CI else pytest.skip("no world-executable Python")


def _unavailable(why: str):
    """Skip with the reason, except under CI=true, where a sandbox that cannot be tested is a failure."""
    if CI:
        pytest.fail(f"CI=true: the sandbox must be tested here, but {why}")
    pytest.skip(why)


def _make_lab(owner: int) -> dict:
    """Home with a token, a checkpoint directory and a copy of the package, all open to everyone, owned by `owner`."""
    root = tempfile.mkdtemp(prefix="tunix_lit_hostile_")
    lab = {"root": root, "home": os.path.join(root, "home"), "ckpt": os.path.join(root, "ckpt"),
           "pkg": os.path.join(root, "pkg")}
    for d in (lab["home"], lab["ckpt"], lab["pkg"]):
        os.mkdir(d)
    lab["secret"] = os.path.join(lab["home"], ".hf_token")
    with open(lab["secret"], "w") as f:
        f.write(SECRET)
    shutil.copy(T.__file__, os.path.join(lab["pkg"], "sandbox.py"))
    lab["tools"] = os.path.join(lab["pkg"], "sandbox.py")
    for p in (root, lab["home"], lab["ckpt"], lab["pkg"]):
        os.chmod(p, 0o777)
    for p in (lab["secret"], lab["tools"]):
        os.chmod(p, 0o644)
    if os.getuid() == 0:
        for dirpath, dirs, files in os.walk(root):
            for p in [dirpath] + [os.path.join(dirpath, f) for f in files]:
                os.chown(p, owner, owner)
    return lab


def _identity(identity: str) -> tuple:
    """(command prefix, python, owner uid, Popen keywords) that run a caller as `identity` ("root" or "user")."""
    me = os.getuid()
    if identity == "root":
        if me == 0:
            return [], sys.executable, 0, {}
        if subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
            return ["sudo", "-n"], sys.executable, me, {}
        _unavailable("the root case needs root or password-less sudo")
    if me == 0:
        uid = _free_uid()
        return [], _world_python(), uid, dict(user=uid, group=uid, extra_groups=[])
    return [], sys.executable, me, {}


def _run_caller(identity: str, backend: str) -> tuple:
    """Run CALLER as `identity` ("root" or "user") against `backend`; its report and the lab it attacked."""
    if T.sandbox_problem() is not None:
        _unavailable(f"this host cannot isolate code: {T.sandbox_problem()}")
    if backend == "bubblewrap" and T.find_bwrap() is None:
        _unavailable("bubblewrap is not installed (.ci/run installs Debian's bubblewrap)")
    prefix, python, owner, kw = _identity(identity)
    lab = _make_lab(owner)
    nr = T._SYSCALLS[os.uname().machine]
    job = {"tag": TAG, "escape": ESCAPE, "ptrace": nr["ptrace"], "vmread": nr["process_vm_readv"], "tools": lab["tools"],
           "secret": lab["secret"], "secret_text": SECRET, "backend": backend, "probes": probes(lab),
           "limits": {f: getattr(LIMITS, f) for f in ("timeout_s", "cpu_s", "memory_mb", "file_mb", "disk_mb", "processes",
                                                       "output_chars")}}
    env = {"HOME": lab["home"], "PATH": "/usr/bin:/bin", "TUNIX_LIT_CALLER_SECRET": SECRET}
    proc = subprocess.run(prefix + [python, "-I", "-c", CALLER, lab["tools"], MARKER], input=json.dumps(job),
                          capture_output=True, text=True, env=env, cwd=lab["root"], timeout=300, **kw)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report["left_behind"] = sorted(os.path.relpath(os.path.join(d, f), lab["root"])
                                   for d, _, files in os.walk(lab["root"]) for f in files if f == "pwned")
    report["package_pwned"] = os.path.exists(os.path.join(os.path.dirname(T.__file__), "pwned"))
    shutil.rmtree(lab["root"])
    return report, lab


# Each identity and each backend by default (root through bubblewrap, a user through our namespaces); the
# other two pairings, which add no new mechanism, in the slow run (`pytest -m slow`).
PAIRS = [pytest.param(("root", "bubblewrap"), id="root-bubblewrap"),
         pytest.param(("user", "namespaces"), id="user-namespaces"),
         pytest.param(("root", "namespaces"), id="root-namespaces", marks=pytest.mark.slow),
         pytest.param(("user", "bubblewrap"), id="user-bubblewrap", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=PAIRS)
def attacked(request):
    """The report of every hostile program, once per (identity, backend)."""
    report, lab = _run_caller(*request.param)
    expected_uid = 0 if request.param[0] == "root" else (os.getuid() or report["uid"])
    assert report["uid"] == expected_uid and (report["uid"] != 0) == (request.param[0] == "user")
    assert report["control_read"] == SECRET  # unsandboxed, the caller's identity reads the token
    return report, lab


def _lines(report, name):
    return report["probes"][name]["stdout"].splitlines()


def test_cannot_read_a_secret_in_the_home(attacked):
    report, lab = attacked
    r = report["probes"]["read_secret"]
    assert SECRET not in r["stdout"] + r["stderr"]
    secret_try, listing_try, view = _lines(report, "read_secret")
    assert secret_try == listing_try == "FileNotFoundError"  # the path does not exist in its view
    home, root = view.split("] [")
    assert home == "["  # its own home is empty
    assert not {"etc", "work", "var", "srv", "mnt", "opt"} & set(eval("[" + root))  # nothing of the host beyond /usr


def test_cannot_write_home_checkpoints_or_the_package(attacked):
    report, _ = attacked
    assert report["left_behind"] == [] and not report["package_pwned"]
    assert all(line in ("FileNotFoundError", "OSError", "PermissionError") for line in _lines(report, "write"))
    assert len(_lines(report, "write")) == 4


def test_sees_no_process_of_the_host(attacked):
    report, _ = attacked
    out = report["probes"]["processes"]["stdout"]
    assert MARKER not in out and SECRET not in out and "pytest" not in out
    pids = eval(out.splitlines()[0][len("pids "):])
    assert len(pids) <= 3 and pids[0] == 1  # the sandbox's own init (bubblewrap), its launcher-turned-program
    caller_line = out.splitlines()[len(pids) + 1]
    assert caller_line.split()[1:] == ["FileNotFoundError", "FileNotFoundError"]  # the caller's PID names nothing


def test_cannot_signal_the_parent_or_anything_outside(attacked):
    report, _ = attacked
    assert report["victim_alive"]  # our sleep, same user as the sandbox, survived SIGKILL to its PID and to -1
    assert report["probes"]["signal"]["stdout"].count("ProcessLookupError") >= 2  # neither PID exists inside


def test_a_fork_bomb_gets_at_most_the_process_limit(attacked):
    report, _ = attacked
    count, failed = (int(v) for v in _lines(report, "fork_bomb")[0].split())
    assert 4 <= count <= LIMITS.processes  # it got some processes, and never more than the limit
    assert failed >= 1
    assert report["alive_after"] == "alive\n"


def test_memory_is_capped(attacked):
    report, _ = attacked
    assert _lines(report, "memory") == [str(16 * 2**20), "MemoryError"]


def test_disk_fill_stops_at_each_tmpfs_size(attacked):
    report, _ = attacked
    big_line, filled_line = _lines(report, "disk")
    filled = eval(filled_line)
    for d in ("/tmp", "/home/sandbox", "/dev/shm"):
        n, err = filled[d]
        assert 1 <= n <= LIMITS.disk_mb and err == "OSError", (d, filled[d])  # ENOSPC at the tmpfs size
    for d in ("/", "/dev", "/usr"):
        assert filled[d] == (0, "OSError"), (d, filled[d])  # read-only
    assert "File too large" in big_line


def test_cannot_reach_the_callers_session_keyring(attacked):
    """The caller put the secret in its session keyring (which a child inherits); the program gets a new one."""
    report, _ = attacked
    r = report["probes"]["keyring"]
    assert report["key_added"] or not CI  # the control: the key is there to be stolen (where keyrings exist)
    assert SECRET not in r["stdout"] + r["stderr"] and "tunix_lit_probe" not in r["stdout"]
    assert r["stdout"].split()[:2] == ["-1", "-1"]  # neither found nor read


def test_cannot_make_a_namespace_of_its_own(attacked):
    """A nested user namespace would give it mounts (a tmpfs of any size) that no limit here sizes."""
    report, _ = attacked
    assert _lines(report, "nested_namespace") == ["-1 -1"]


def test_no_network(attacked):
    report, _ = attacked
    host, dns, out, ifaces = _lines(report, "network")
    assert host in ("host ConnectionRefusedError", "host OSError") and not report["connection_arrived"]
    assert dns == "dns gaierror" and out in ("out OSError", "out TimeoutError")
    assert ifaces == "ifaces [(1, 'lo')]"


def test_no_bubblewrap_and_no_namespaces_fails_closed(monkeypatch, tmp_path):
    """Without bubblewrap and with the bootstrap's unshare refused (EINVAL), nothing runs."""
    marker = tmp_path / "ran"
    monkeypatch.setattr(T, "find_bwrap", lambda: None)
    monkeypatch.setattr(T, "_NAMESPACES", T._NAMESPACES.replace("libc.unshare(0x10000000", "libc.unshare(0x7fffffff"))
    code = f"open({str(marker)!r}, 'w').write('x')"
    with pytest.raises(T.SandboxUnavailable, match="namespaces.*could not be set up.*bubblewrap"):
        T.run_code(code)
    with pytest.raises(T.SandboxUnavailable, match="bubblewrap is not installed"):
        T.run_code(code, backend="bubblewrap")
    assert not marker.exists()


def test_the_view_is_explicit_and_refuses_protected_directories(tmp_path, monkeypatch):
    """An interpreter outside /usr shows its binary, standard library, lib-dynload and shared libraries, not its
    prefix; undeclared site dirs are masked; a view holding a home (from pwd), the working directory or a hidden
    directory is refused."""
    tree = tmp_path / "home" / "alice" / ".pyenv" / "versions" / "3.11.7"
    stdlib = tree / "lib" / "python3.11"
    for d in (tree / "bin", stdlib / "lib-dynload", stdlib / "site-packages", tree / "share"):
        d.mkdir(parents=True)
    for f in (tree / "bin" / "python3.11", tree / "lib" / "libpython3.11.so.1.0", tree / "lib" / "notes.txt"):
        f.write_text("")
    layout = {"executable": str(tree / "bin" / "python3.11"), "prefix": str(tree), "stdlib": str(stdlib),
              "platstdlib": str(stdlib), "dynload": str(stdlib / "lib-dynload"), "libdir": str(tree / "lib"),
              "site": [str(stdlib / "site-packages")]}
    monkeypatch.setattr(T, "interpreter_layout", lambda python: dict(layout))
    view = T.sandbox_view("python")
    assert "/usr" in view["ro"] and layout["executable"] in view["ro"] and str(stdlib) in view["ro"]
    assert str(tree / "lib" / "libpython3.11.so.1.0") in view["ro"]
    assert not {str(tree), str(tree / "lib"), str(tree / "share"), str(tree / "lib" / "notes.txt")} & set(view["ro"])
    assert str(stdlib / "site-packages") in view["masks"] and view["site"] == []
    declared = T.sandbox_view("python", site_packages=[str(stdlib / "site-packages")])
    assert declared["site"] == [str(stdlib / "site-packages")] and str(stdlib / "site-packages") not in declared["masks"]
    if os.path.isdir("/usr/local/etc"):
        assert "/usr/local/etc" in view["masks"]
    with pytest.raises(T.SandboxUnavailable, match="holds"):  # a directory the caller hides (checkpoints)
        T.sandbox_view("python", hide=[str(stdlib / "ckpt")])
    monkeypatch.chdir(stdlib)
    with pytest.raises(T.SandboxUnavailable, match="holds"):  # the working directory
        T.sandbox_view("python")
    monkeypatch.chdir(tmp_path)
    own_home = pwd.getpwuid(os.getuid()).pw_dir
    monkeypatch.setenv("HOME", "/nonexistent")  # the home comes from the password database, not from $HOME
    monkeypatch.setattr(T, "interpreter_layout", lambda python: dict(layout, prefix=own_home))
    with pytest.raises(T.SandboxUnavailable, match=f"holds {own_home}"):
        T.sandbox_view("python")


HOME_CALLER = r'''
import importlib.util, json, sys, types
for name in ("tunix_lit", "tunix_lit.agentic", "tunix_lit.agentic.tools"):  # the copy's one import of the package
    sys.modules[name] = types.ModuleType(name)
sys.modules["tunix_lit.agentic.tools"].ToolTimeout = type("ToolTimeout", (Exception,), {})
sys.modules["tunix_lit.agentic.tools"].clean_text = str
spec = importlib.util.spec_from_file_location("tunix_lit.agentic.sandbox", sys.argv[1])
T = importlib.util.module_from_spec(spec)
spec.loader.exec_module(T)
home = sys.argv[2]
code = ("import os\nprint(sorted(os.listdir(%r)))\n" % home
        + "".join("try:\n    print(open(%r, %r).read())\nexcept OSError as e:\n    print(type(e).__name__)\n" % (p, m)
                  for p, m in ((home + "/.hf_token", "r"), (home + "/pwned", "w"), (home + "/.pyenv/pwned", "w"))))
print(json.dumps({"view": T.sandbox_view(T.sandbox_python())["ro"],
                  "runs": {b: T.run_code(code, backend=b).stdout.splitlines() for b in T.BACKENDS}}))
'''


def test_an_interpreter_in_the_users_home_shows_itself_and_nothing_else_of_the_home():
    """The laptop case: Python installed in the user's home (as pyenv does). Its tree is shown, read-only;
    the token beside it is not, and nothing in the home can be written."""
    if T.sandbox_problem() is not None:
        _unavailable(f"this host cannot isolate code: {T.sandbox_problem()}")
    system = os.path.realpath("/usr/bin/python3")
    if not os.path.exists(system):
        _unavailable("no /usr/bin/python3 to install into a home")
    home = tempfile.mkdtemp(prefix="tunix_lit_home_", dir="/var/tmp")  # not under /tmp, which the sandbox replaces
    try:
        os.makedirs(os.path.join(home, ".pyenv", "bin"))
        python = os.path.join(home, ".pyenv", "bin", "python3")
        shutil.copy(system, python)  # finds its standard library under /usr, as it was built to
        with open(os.path.join(home, ".hf_token"), "w") as f:
            f.write(SECRET)
        tools = os.path.join(home, "sandbox.py")
        shutil.copy(T.__file__, tools)
        uid, kw = os.getuid(), {}
        if uid == 0:
            uid = _free_uid()
            kw = dict(user=uid, group=uid, extra_groups=[])
            for dirpath, _, files in os.walk(home):
                for p in [dirpath] + [os.path.join(dirpath, f) for f in files]:
                    os.chown(p, uid, uid)
        os.chmod(home, 0o700)
        proc = subprocess.run([python, "-I", "-c", HOME_CALLER, tools, home], capture_output=True, text=True,
                              env={"HOME": home, "PATH": "/usr/bin:/bin"}, cwd=home, timeout=120, **kw)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads(proc.stdout)
        assert os.path.join(home, ".pyenv", "bin", "python3") in report["view"] and home not in report["view"]
        for backend, lines in report["runs"].items():
            assert lines == ["['.pyenv']", "FileNotFoundError", "OSError", "OSError"], backend  # OSError: read-only
        assert not [f for _, _, files in os.walk(home) for f in files if f == "pwned"]
    finally:
        shutil.rmtree(home)


def test_nothing_outlives_the_call(attacked):
    """An escaping program (setsid, forks, sleeps past the clock): none of its processes is left when run_code
    returns, nor 0.5 s later; also when only the kill through the namespace's PID 1 is left to do it."""
    report, _ = attacked
    for way, s in report["survivors"].items():
        assert s["printed"] == "running\n" and s["status"] == "timed out, then killed by SIGKILL", way
        assert s["at_return"] == [] and s["after"] == [], (way, s)


def test_ptrace_and_process_vm_of_pid1_are_refused(attacked):
    """The first step of the ptrace trick (attach to PID 1, its parent, same uid) and reading its memory: EPERM."""
    report, _ = attacked
    assert _lines(report, "ptrace_pid1") == ["-1 1", "-1 1"]


def test_seccomp_refuses_each_denied_call(attacked):
    report, _ = attacked
    got = json.loads(report["probes"]["seccomp"]["stdout"])
    assert got == {n: [-1, 1] for n in T.DENIED}  # every one: -1 with EPERM


def test_no_privileges_and_a_cgroup_namespace_of_its_own(attacked):
    report, _ = attacked
    caps, cgroup = _lines(report, "privileges")
    assert eval(caps) == ["0000000000000000"] * 3 + ["1", "2"]  # CapPrm, CapEff, CapBnd; NoNewPrivs; Seccomp filter
    assert cgroup == "['0::/']"  # its own cgroup is the root of its cgroup namespace


def test_keys_host_figures_and_packages_are_masked(attacked):
    report, _ = attacked
    lines = _lines(report, "masks")
    for line in lines[:4]:
        path, value = line.split(" ", 1)
        assert value in ("''", "'PermissionError'"), line  # empty, or no access at all
    assert lines[4:] == ["etc []", "site []"]


def test_one_memory_bound_over_the_whole_call(attacked):
    """Children allocating until they cannot, every tmpfs filled, a 1 GiB memfd: all held at once stays under
    memory_mb. Without a cgroup, memfd is refused; with one, memory.max counts it."""
    report, _ = attacked
    if report["memory_mechanism"] == "cgroup" and not _lines(report, "hold"):  # memory.max's OOM kill took the tally
        assert report["probes"]["hold"]["returncode"] == -9
        return
    held, memfd = _lines(report, "hold")[0].split()
    assert LIMITS.tmpfs_mb // 2 < int(held) <= LIMITS.memory_mb
    if report["memory_mechanism"] == "rlimit":
        assert memfd == "PermissionError"  # refused by the filter: no rlimit would count it
    else:
        assert memfd in ("held", "OSError")  # counted by memory.max: 1 GiB more than the bound leaves


KILL_CALLER = r"""
import importlib.util, sys, types
for name in ("tunix_lit", "tunix_lit.agentic", "tunix_lit.agentic.tools"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["tunix_lit.agentic.tools"].ToolTimeout = type("ToolTimeout", (Exception,), {})
sys.modules["tunix_lit.agentic.tools"].clean_text = str
spec = importlib.util.spec_from_file_location("tunix_lit.agentic.sandbox", sys.argv[1])
T = importlib.util.module_from_spec(spec)
spec.loader.exec_module(T)
T.run_code(sys.argv[3], T.SandboxLimits(timeout_s=60), backend=sys.argv[2])
"""


def _tagged() -> list:
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            found += [int(p)] if open(f"/proc/{p}/comm").read().strip() == TAG else []
        except OSError:
            pass
    return found


@pytest.mark.parametrize("identity,backend", [(i, b) for i in ("root", "user") for b in T.BACKENDS])
def test_nothing_outlives_a_caller_killed_mid_call(identity, backend):
    """SIGKILL the caller while its escaping program runs: within 3 s no process of the call is left."""
    if T.sandbox_problem() is not None:
        _unavailable(f"this host cannot isolate code: {T.sandbox_problem()}")
    if backend == "bubblewrap" and T.find_bwrap() is None:
        _unavailable("bubblewrap is not installed (.ci/run installs Debian's bubblewrap)")
    prefix, python, owner, kw = _identity(identity)
    lab = _make_lab(owner)
    try:
        caller = subprocess.Popen(prefix + [python, "-I", "-c", KILL_CALLER, lab["tools"], backend, ESCAPE],
                                  cwd=lab["root"], env={"HOME": lab["home"], "PATH": "/usr/bin:/bin"}, **kw)
        deadline = time.monotonic() + 20
        while len(_tagged()) < 4 and time.monotonic() < deadline and caller.poll() is None:
            time.sleep(0.05)
        running = len(_tagged())
        os.kill(caller.pid, signal.SIGKILL) if not prefix else subprocess.run(["sudo", "-n", "kill", "-9", str(caller.pid)])
        caller.wait()
        deadline = time.monotonic() + 3
        while _tagged() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running == 4 and _tagged() == [], (running, _tagged())
    finally:
        for pid in _tagged():  # a failed test leaves nothing behind either
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(lab["root"])


def test_pid1_is_undumpable_even_where_the_filter_allows_ptrace(monkeypatch):
    """The second wall: with ptrace let through the filter, attaching to PID 1 still fails (it is undumpable and
    the program has no capability), while attaching to a dumpable child of its own works: the filter was off."""
    if T.sandbox_problem() is not None:
        _unavailable(f"this host cannot isolate code: {T.sandbox_problem()}")
    monkeypatch.setattr(T, "DENIED", tuple(n for n in T.DENIED if n != "ptrace"))
    nr = T._SYSCALLS[os.uname().machine]["ptrace"]
    code = ("import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\nchild = os.fork()\n"
            "if child == 0:\n    time.sleep(30)\n"
            f"print(libc.syscall({nr}, 0x4206, 1, 0, 0), ctypes.get_errno(), libc.syscall({nr}, 0x4206, child, 0, 0))")
    r = T.run_code(code, LIMITS, backend="namespaces")
    assert r.stdout.split() == ["-1", "1", "0"], (r.stdout, r.stderr)


# The ptrace trick of the red-team pass, for x86_64: attach to PID 1 (our parent, same uid), make it call setsid()
# and prctl(PR_SET_PDEATHSIG, 0) through its own syscall instruction, detach, then leave our session too.
PTRACE_TRICK = r"""import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
names = "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs"
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in names.split()]
pt = libc.ptrace
pt.restype, pt.argtypes = ctypes.c_long, [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
if pt(16, 1, None, None) != 0:  # PTRACE_ATTACH to PID 1, our parent
    print("attach refused", ctypes.get_errno(), flush=True)
    raise SystemExit(0)
os.waitpid(1, 0x40000000)  # __WALL
saved = Regs()
pt(12, 1, None, ctypes.byref(saved))  # GETREGS: PID 1 sits in wait4, just after its syscall instruction
word = pt(2, 1, ctypes.c_void_p(saved.rip - 2), None) & 0xFFFF  # PEEKTEXT
def inject(nr, *args):
    r = Regs.from_buffer_copy(saved)
    r.rax, r.orig_rax, r.rip = nr, 2**64 - 1, saved.rip - 2
    for name, v in zip(("rdi", "rsi", "rdx"), args):
        setattr(r, name, v)
    pt(13, 1, None, ctypes.byref(r))  # SETREGS
    pt(9, 1, None, None)  # SINGLESTEP over the syscall instruction
    os.waitpid(1, 0x40000000)
    out = Regs()
    pt(12, 1, None, ctypes.byref(out))
    return ctypes.c_longlong(out.rax).value
done = (hex(word), inject(112), inject(157, 1, 0))  # setsid(), prctl(PR_SET_PDEATHSIG, 0)
pt(13, 1, None, ctypes.byref(saved))
pt(17, 1, None, None)  # DETACH: PID 1 goes back to its wait
os.setsid()
libc.prctl(15, b"%s", 0, 0, 0)
print("escaped", done, flush=True)
time.sleep(60)
"""


def _walls_down(monkeypatch):
    """Let ptrace through the filter and leave PID 1 dumpable: the trick then succeeds, and only the kill through
    PID 1's pidfd stands between it and a survivor."""
    monkeypatch.setattr(T, "DENIED", tuple(n for n in T.DENIED if n != "ptrace"))
    patched = T._NAMESPACES.replace("if libc.prctl(4, 0, 0, 0, 0) != 0:", "if False:")
    assert patched != T._NAMESPACES
    monkeypatch.setattr(T, "_NAMESPACES", patched)


@pytest.mark.parametrize("backend", ["namespaces", pytest.param("bubblewrap", marks=pytest.mark.slow)])
def test_the_ptrace_trick_done_whole_still_leaves_no_survivor(monkeypatch, backend):
    """With both walls against it taken down, the trick works (PID 1 leaves the session and forgets its parent);
    with the process-group kill switched off as well, the kill through the namespace's PID 1 still leaves nothing
    alive when run_code returns. The control, the process-group kill alone (the code before this kill), leaves
    the program running."""
    if os.uname().machine != "x86_64":
        pytest.skip("the trick's register layout is x86_64's")
    if T.sandbox_problem() is not None:
        _unavailable(f"this host cannot isolate code: {T.sandbox_problem()}")
    if backend == "bubblewrap" and T.find_bwrap() is None:
        _unavailable("bubblewrap is not installed (.ci/run installs Debian's bubblewrap)")
    _walls_down(monkeypatch)
    monkeypatch.setattr(T, "_kill_group", lambda pid: None)
    code = PTRACE_TRICK % TAG.encode().decode()
    try:
        r = T.run_code(code, T.SandboxLimits(timeout_s=2), backend=backend)
        assert r.stdout.startswith("escaped ('0x50f', ") and r.timed_out, (r.stdout, r.stderr)  # the trick worked
        assert _tagged() == []
        if backend == "namespaces":  # the control: the process-group kill alone, and the escaped program lives on
            monkeypatch.undo()
            _walls_down(monkeypatch)
            real = T._namespace_init
            monkeypatch.setattr(T, "_namespace_init", lambda fd, deadline: os.close(real(fd, deadline)))
            r = T.run_code(code, T.SandboxLimits(timeout_s=2), backend=backend)
            assert r.stdout.startswith("escaped") and _tagged() != []
    finally:
        for pid in _tagged():
            os.kill(pid, signal.SIGKILL)
