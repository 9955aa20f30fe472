"""Tests for tunix_lit.agentic.tools: the trajectory record, tools and their errors, parsers, the sandbox, environments."""
import os
import socket
import time

import numpy as np
import pytest

from tunix_lit.agentic import tools as T


# --- the record ------------------------------------------------------------------------------------

def test_status_names_the_six_endings_and_running():
    assert {s.name for s in T.ENDINGS} == {"SUCCEEDED", "MAX_STEPS_REACHED", "MAX_CONTEXT_LIMIT_REACHED", "TIMEOUT",
                                           "ENV_TIMEOUT", "FAILED"}
    assert T.Status.RUNNING not in T.ENDINGS


def test_conversation_mask_is_one_exactly_on_model_tokens():
    """Hand-built: model [5, 6, 7], env [8, 9], model [10]; mask 1,1,1,0,0,1; env log-probs 0, missing ones NaN."""
    traj = T.Trajectory(task={}, prompt_tokens=np.array([1, 2]), turns=[
        T.Turn("model", "a", [5, 6, 7], [-0.1, -0.2, -0.3]), T.Turn("env", "b", [8, 9]), T.Turn("model", "c", [10])])
    ids, mask, lps = traj.conversation()
    assert ids.tolist() == [5, 6, 7, 8, 9, 10]
    assert mask.tolist() == [1, 1, 1, 0, 0, 1]
    np.testing.assert_allclose(lps[:5], [-0.1, -0.2, -0.3, 0.0, 0.0], rtol=1e-6)
    assert np.isnan(lps[5])
    assert ids.dtype == np.int32 and mask.dtype == np.int32 and lps.dtype == np.float32


def test_turn_rejects_bad_role_and_mismatched_logprobs():
    with pytest.raises(ValueError, match="role"):
        T.Turn("user", "x", [1])
    with pytest.raises(ValueError, match="match tokens"):
        T.Turn("model", "x", [1, 2], [0.0])


def test_empty_trajectory_has_empty_arrays():
    ids, mask, lps = T.Trajectory(task={}, prompt_tokens=np.array([1])).conversation()
    assert ids.size == mask.size == lps.size == 0


# --- tools -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("a,op,b", [(1234, "+", 5678), (-3, "-", 9), (12, "*", 34), (84, "/", 7)])
def test_calculator_matches_python_arithmetic(a, op, b):
    expected = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    assert T.Calculator()(a=a, op=op, b=b) == str(expected)


@pytest.mark.parametrize("args,needle", [({"a": 1}, "missing op, b"), ({"a": 1, "op": "+", "b": 2, "c": 3}, "unexpected c"),
                                         ({"a": "1", "op": "+", "b": 2}, "'a' must be integer"),
                                         ({"a": True, "op": "+", "b": 2}, "got bool"), ([1, 2], "must be an object")])
def test_check_arguments_names_what_is_wrong(args, needle):
    assert needle in T.check_arguments(T.Calculator(), args)


def test_float_parameter_accepts_an_int():
    class Half:
        name, description, parameters = "half", "x/2", {"x": float}
    assert T.check_arguments(Half(), {"x": 3}) is None


class Raises:
    name, description, parameters = "boom", "always raises", {}

    def __call__(self):
        raise KeyError("no such row")


class Hangs:
    name, description, parameters = "hang", "never returns in time", {}

    def __call__(self):
        time.sleep(5)
        return "late"


def test_tool_manager_turns_each_failure_into_its_error_kind():
    m = T.ToolManager([T.Calculator(), Raises(), Hangs()], timeout_s=0.2)
    cases = [(T.ToolCall("calculator", {"a": 2, "op": "*", "b": 21}), None, "42"),
             (T.ToolCall("calc", {}), "unknown_tool", "valid tools: calculator, boom, hang"),
             (T.ToolCall("calculator", {"a": 2}), "bad_arguments", "missing op, b"),
             (T.ToolCall("calculator", {"a": 2, "op": "%", "b": 3}), "tool_error", "unknown operator"),
             (T.ToolCall("boom", {}), "tool_error", "KeyError"),
             (T.ToolCall("hang", {}), "tool_timeout", "timed out")]
    for call, kind, needle in cases:
        start = time.monotonic()
        obs = m.run(call)
        assert obs.error == kind and needle in obs.text, (call, obs)
        assert time.monotonic() - start < 2.0  # the hanging tool is abandoned at its timeout


def test_tool_manager_rejects_duplicates_and_non_tools():
    with pytest.raises(ValueError, match="unique"):
        T.ToolManager([T.Calculator(), T.Calculator()])
    with pytest.raises(TypeError, match="not a tool"):
        T.ToolManager([object()])
    with pytest.raises(ValueError, match="positive"):
        T.ToolManager([T.Calculator()], timeout_s=0)


def test_tool_schema_is_openai_function_format():
    s = T.tool_schema(T.Calculator())
    assert s["type"] == "function" and s["function"]["name"] == "calculator"
    assert s["function"]["parameters"]["properties"] == {"a": {"type": "integer"}, "op": {"type": "string"},
                                                        "b": {"type": "integer"}}
    assert s["function"]["parameters"]["required"] == ["a", "op", "b"]


# --- parsers ---------------------------------------------------------------------------------------

ADD = T.ToolCall("calculator", {"a": 2, "op": "+", "b": 3})


@pytest.mark.parametrize("name,text,calls", [
    ("qwen", 'x<tool_call>{"name": "calculator", "arguments": {"a": 2, "op": "+", "b": 3}}</tool_call>', [ADD]),
    ("hermes", '<tool_call>\n{"name": "calculator", "arguments": "{\\"a\\": 2, \\"op\\": \\"+\\", \\"b\\": 3}"}\n</tool_call>'
               '<tool_call>{"name": "calculator", "arguments": {"a": 2, "op": "+", "b": 3}}</tool_call>', [ADD, ADD]),
    ("llama", '<|python_tag|>{"name": "calculator", "parameters": {"a": 2, "op": "+", "b": 3}}<|eom_id|>', [ADD]),
    ("llama", '{"name": "calculator", "parameters": {"a": 2, "op": "+", "b": 3}}; '
              '{"name": "calculator", "parameters": {"a": 2, "op": "+", "b": 3}}', [ADD, ADD]),
    ("gemma", 'Sure.\n```tool_code\ncalculator(a=2, op="+", b=3)\ncalculator(a=2, op="+", b=3)\n```', [ADD, ADD]),
    ("tiny", "2+3\n", [ADD]),
])
def test_parsers_read_well_formed_calls(name, text, calls):
    parsed = T.get_parser(name).parse(text)
    assert parsed.calls == calls and parsed.errors == [] and not parsed.is_answer


@pytest.mark.parametrize("name,text", [("qwen", "The answer is 5."), ("llama", "The answer is 5."),
                                       ("gemma", "The answer is 5."), ("tiny", "5")])
def test_a_turn_without_calls_is_the_answer(name, text):
    parsed = T.get_parser(name).parse(text)
    assert parsed.is_answer and parsed.text == text


@pytest.mark.parametrize("name,text,needle", [
    ("qwen", "<tool_call>{'name': 'calculator'}</tool_call>", "not valid JSON"),
    ("qwen", '<tool_call>{"arguments": {}}</tool_call>', "string 'name'"),
    ("qwen", '<tool_call>{"name": "calculator", "arguments": [1]}</tool_call>', "must be an object"),
    ("qwen", '<tool_call>{"name": "calculator", "arguments": {}}', "never closed"),
    ("llama", '{"name": "calculator", "parameters": {"a": 2,', "not valid JSON"),
    ("gemma", "```tool_code\ncalculator(2, 3)\n```", "by name"),
    ("gemma", "```tool_code\ncalculator(a=b)\n```", "literals"),
    ("gemma", "```tool_code\nos.system('ls')\n```", "must be name(arg=value"),
    ("gemma", "```tool_code\ncalculator(a=2", "never closed"),
    ("tiny", "2+\n", "tiny-world call"),
    ("tiny", "2+3+4\n", "tiny-world call"),
])
def test_malformed_calls_become_errors(name, text, needle):
    parsed = T.get_parser(name).parse(text)
    assert not parsed.is_answer and any(needle in e for e in parsed.errors), parsed


def test_gemma_parser_never_executes_code(tmp_path):
    marker = tmp_path / "pwned"
    parsed = T.get_parser("gemma").parse(f"```tool_code\ncalculator(a=__import__('os').system('touch {marker}'))\n```")
    assert parsed.errors and not parsed.calls and not marker.exists()


def test_unknown_parser_lists_the_names():
    with pytest.raises(ValueError, match="qwen, hermes, llama, gemma, tiny"):
        T.get_parser("mistral")


# --- the sandbox -----------------------------------------------------------------------------------

FAST = T.SandboxLimits(timeout_s=5, cpu_s=5)


@pytest.fixture
def sandbox():
    """Skip with the reason on a host that cannot isolate code; under CI=true (.ci/run installs bubblewrap), fail."""
    problem = T.sandbox_problem()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: the code sandbox must work here, but {problem}")
        pytest.skip(f"this host cannot isolate code: {problem}")


needs_sandbox = pytest.mark.usefixtures("sandbox")


@needs_sandbox
def test_sandbox_runs_code_and_returns_its_output():
    r = T.run_code("print(6 * 7)", FAST)
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
        r = T.run_code(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')", FAST)
        assert r.returncode != 0 and "connected" not in r.stdout
        assert "ConnectionRefusedError" in r.stderr or "unreachable" in r.stderr  # its own loopback, or none
        with pytest.raises(socket.timeout):
            server.accept()  # nothing arrived from the sandbox
    finally:
        server.close()


@needs_sandbox
def test_sandbox_cannot_resolve_names():
    r = T.run_code("import socket\nprint(socket.getaddrinfo('example.com', 80))", FAST)
    assert r.returncode != 0 and "gaierror" in r.stderr


@needs_sandbox
def test_sandbox_stops_a_fork_bomb_and_the_host_survives():
    """Children that wait until fork fails: the count it got is below the process limit, and not zero."""
    limits = T.SandboxLimits(timeout_s=5, processes=8)
    start = time.monotonic()
    r = T.run_code("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30)\n"
                   "        n += 1\nexcept OSError as e:\n    print(n, type(e).__name__)", limits)
    got, error = r.stdout.split()
    assert 1 <= int(got) < limits.processes and error == "BlockingIOError"  # EAGAIN: the limit, not a crash
    assert not r.timed_out and time.monotonic() - start < 5  # its sleeping children died with it
    assert T.run_code("print('alive')", FAST).stdout == "alive\n"


@needs_sandbox
def test_sandbox_stops_a_10_gb_allocation_and_the_host_survives():
    r = T.run_code("x = bytearray(10 * 2**30)\nprint('allocated')", FAST)
    assert r.returncode != 0 and "MemoryError" in r.stderr and "allocated" not in r.stdout
    assert T.run_code("print('alive')", FAST).stdout == "alive\n"


@needs_sandbox
def test_sandbox_kills_at_the_wall_clock():
    start = time.monotonic()
    r = T.run_code("import time\ntime.sleep(30)", T.SandboxLimits(timeout_s=1))
    assert r.timed_out and r.returncode < 0 and time.monotonic() - start < 5


@needs_sandbox
def test_a_process_that_leaves_its_group_dies_with_the_run():
    """A grandchild in its own session holding stdout open would keep a plain subprocess alive for 60 s."""
    start = time.monotonic()
    r = T.run_code("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent done')", FAST)
    assert r.stdout == "parent done\n" and not r.timed_out and time.monotonic() - start < 4
    start = time.monotonic()
    r = T.run_code("import os, time\nos.setsid()\nif os.fork() == 0:\n    time.sleep(60)\ntime.sleep(60)",
                   T.SandboxLimits(timeout_s=1))
    assert r.timed_out and time.monotonic() - start < 4


@needs_sandbox
def test_sandbox_cpu_and_file_limits():
    r = T.run_code("while True: pass", T.SandboxLimits(timeout_s=10, cpu_s=1))
    assert not r.timed_out and r.returncode < 0  # killed by the CPU limit before the wall clock
    r = T.run_code("open('big', 'wb').write(b'x' * (3 << 20))", T.SandboxLimits(file_mb=1))
    assert r.returncode != 0 and "File too large" in r.stderr


@needs_sandbox
def test_sandbox_environment_holds_only_home_and_its_files_are_thrown_away(monkeypatch):
    monkeypatch.setenv("TUNIX_LIT_TEST_SECRET", "do-not-leak")
    r = T.run_code("import os\nprint(os.listdir('.'))\nopen('note', 'w').write('x')\nprint(os.getcwd())\n"
                   "print(sorted(os.environ))", FAST)
    listing, cwd, env = r.stdout.splitlines()
    assert listing == "['main.py']" and cwd == "/tmp"
    assert "HOME" in eval(env) and set(eval(env)) <= {"HOME", "PWD", "LC_CTYPE"}  # PWD: bubblewrap; LC_CTYPE: Python
    assert T.run_code("import os\nprint(os.listdir('.'))", FAST).stdout == "['main.py']\n"  # the note is gone


@needs_sandbox
def test_sandbox_fails_closed_when_bubblewrap_refuses(monkeypatch, tmp_path):
    """bubblewrap given an option it does not know exits before running anything: SandboxUnavailable, no run."""
    if T.find_bwrap() is None:
        pytest.skip("bubblewrap is not installed; the namespaces case is tested in test_sandbox.py")
    build = T._bwrap_command
    monkeypatch.setattr(T, "_bwrap_command", lambda *a: build(*a)[:1] + ["--no-such-option"] + build(*a)[1:])
    marker = tmp_path / "ran"
    with pytest.raises(T.SandboxUnavailable, match="bubblewrap.*could not be set up.*no-such-option"):
        T.run_code(f"open({str(marker)!r}, 'w').write('x')", FAST)
    assert not marker.exists()


@needs_sandbox
def test_python_tool_timeout_is_a_tool_timeout_observation():
    m = T.ToolManager([T.PythonTool(T.SandboxLimits(timeout_s=0.5))], timeout_s=5)
    assert m.run(T.ToolCall("python", {"code": "print(2 ** 10)"})) == T.Observation("1024\n")
    assert m.run(T.ToolCall("python", {"code": "while True: pass"})).error == "tool_timeout"
    failed = m.run(T.ToolCall("python", {"code": "1/0"}))
    assert failed.error is None and "ZeroDivisionError" in failed.text and "exit status 1" in failed.text


# --- environments ----------------------------------------------------------------------------------

def test_sum_tasks_answers_are_the_sums_and_reproducible():
    tasks = T.sum_tasks(50, digits=4, seed=3)
    for t in tasks:
        a, b = t["prompt"].rstrip("=").split("+")
        assert len(a) == len(b) == 4 and t["answer"] == str(int(a) + int(b))
    assert tasks == T.sum_tasks(50, digits=4, seed=3) and tasks != T.sum_tasks(50, digits=4, seed=4)


def test_calculator_env_runs_calls_counts_errors_and_scores_the_answer():
    env = T.calculator_env({"prompt": "1234+5678=", "answer": "6912"})
    assert env.reset() == "1234+5678="
    call = env.step("1234+5678\n")
    assert (call.observation, call.reward, call.done, call.counts["calls"]) == ("6912\n", 0.0, False, 1)
    bad = env.step("1234+\n")
    assert (bad.observation, bad.done, bad.counts["parse_error"]) == ("=\n", False, 1)
    assert (env.step("6912").reward, env.step("6912").done, env.step("6913").reward) == (1.0, True, 0.0)


def test_tool_env_with_qwen_format_counts_unknown_tools():
    env = T.ToolEnv({"prompt": "p", "answer": "5"}, T.ToolManager([T.Calculator()]), "qwen", T.exact_match)
    r = env.step('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>')
    assert r.counts["unknown_tool"] == 1 and "<tool_response>" in r.observation and "valid tools: calculator" in r.observation
    with pytest.raises(KeyError, match="prompt_key"):
        T.ToolEnv({"question": "p"}, T.ToolManager([]), "qwen", T.exact_match)
