"""Make a chapter notebook open and run from its Colab badge, and say what still needs a human.

    python tools/colab_ready.py nbs/10_model.ipynb [more notebooks ...]   # fix, then report
    python tools/colab_ready.py --check nbs/*.ipynb                       # report only, exit 1 on a problem

What it writes, idempotently (a second run changes nothing):

1. **The install cell**, placed before the first code cell that does anything (after `#| default_exp`):
   on Colab it clones the repository, `pip install`s it (plus any extra packages the cell already
   named, or `--extra`), puts the clone on `sys.path` so the running kernel imports it without a
   restart, and changes into the clone's `nbs/` folder so relative paths (`../recipes`, data files,
   `images/`) mean what they mean locally. Elsewhere it does nothing. Plain Python
   (`subprocess`), no `!` magics, so the notebook stays valid Python for jupytext and nbdev.
2. **Image links by absolute URL.** A markdown image (`![..](images/x.svg)`, `<img src="../chapters/images/y.png">`)
   that points at a file of this repository becomes its raw-file URL on the default branch, so it
   loads on Colab. `tools/build_site.py` maps those URLs back to the site's local copies.
3. **A note on TPUs** (a markdown cell starting `**On a TPU.**`) after the install cell, unless the
   notebook already has one: what the hidden set-up cells do there. A chapter that runs a model
   should rewrite it to name its own dtype, mesh and batch.
4. **The closing `nbdev_export()` cell guarded**: Colab runs every cell, that one too, and has no
   nbdev; the guarded cell does nothing there.

What it reports and cannot fix (`check_notebook`, also what `tests/test_colab_ready.py` asserts):
a missing or misplaced install cell, a `!`/`%` shell magic in it, a relative image path, a
hard-coded device index or count (`jax.devices()[3]`, `devices[:4]`, `make_mesh(2, 4)`,
`.reshape(2, 4)` of a device list), a notebook that loads a model without a `MODEL` setting at
the top that a load call reads, and a package a notebook imports (or needs for a model or engine it
names) that neither the package's own requirements nor the install cell's extras bring (`--extra`).

Why the hidden set-up cells stay as they are: `XLA_FLAGS=--xla_force_host_platform_device_count=8`
only shapes JAX's *CPU* backend, so on a TPU runtime `jax.devices()` is still the TPU chips; and
`runtime.tune_host_allocator()` returns without touching anything when the backend is not the CPU.
Both are harmless on a TPU and need no skipping.
"""

import argparse
import ast
import configparser
import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INSTALL_MARKER = '"google.colab" in sys.modules'  # how the install cell is recognised
TPU_NOTE_MARKER = "**On a TPU.**"
_IMAGE_MD = re.compile(r"(!\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?)([^)\s>]+)(>?(?:\s+\"[^\"]*\")?\s*\))")
_IMAGE_HTML = re.compile(r"""(<img\b[^>]*?\bsrc=["'])([^"']+)(["'])""", re.I)
_ABSOLUTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|/|#)", re.I)  # https:, data:, attachment:, /x, #x
_EXPORT = re.compile(r"^\s*#\s*\|\s*export", re.M)
_DIRECTIVE_ONLY = re.compile(r"^(\s*#\s*\|.*\n?)*\s*$")
MODEL_LOADERS = {"load_model", "load_hf"}  # plus `tiny.load`: a call of one of these runs a real model
_PARALLEL_KWARGS = {"tensor_parallel_size", "tp_size", "data_parallel_size", "dp_size", "num_devices"}  # engines' device counts
MODEL_TOP_CELLS = 10  # the MODEL setting must be among this many first code cells


def repo_settings() -> tuple:
    """(repository URL, branch) from settings.ini."""
    cp = configparser.ConfigParser()
    cp.read(ROOT / "settings.ini")
    s = cp["DEFAULT"] if cp.has_section("DEFAULT") or cp.defaults() else {}
    return (s.get("git_url", "https://github.com/tunix-lit/tunix-from-the-inside").rstrip("/"),
            s.get("branch", "main"))


def raw_base() -> str:
    """The URL prefix of the repository's raw files on the default branch (ends with '/')."""
    url, branch = repo_settings()
    owner_repo = url.split("github.com/", 1)[1]
    return f"https://raw.githubusercontent.com/{owner_repo}/{branch}/"


def install_source(extra: tuple = ()) -> str:
    """The canonical install cell's source; `extra` are more pip packages (e.g. 'datasets').

    Two environment variables, unset on Colab, let a test run the cell as Colab does against another copy of the
    repository: TUNIX_LIT_GIT_URL (what to clone, e.g. a local repository) and TUNIX_LIT_COLAB_REPO (where to)."""
    url, _ = repo_settings()
    name = url.rsplit("/", 1)[1]
    extra_args = "".join(f', "{p}"' for p in extra)
    return (
        "# On Colab: fetch the repository, install the package, work from its nbs/ folder; elsewhere nothing happens.\n"
        "import os\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        f"if {INSTALL_MARKER}:\n"
        f'    REPO = os.environ.get("TUNIX_LIT_COLAB_REPO", "/content/{name}")\n'
        "    if not os.path.isdir(REPO):\n"
        f'        SOURCE = os.environ.get("TUNIX_LIT_GIT_URL", "{url}")\n'
        '        subprocess.run(["git", "clone", "--depth", "1", SOURCE, REPO], check=True)\n'
        f'        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", REPO{extra_args}], check=True)\n'
        "    sys.path.insert(0, REPO)  # importable now, without restarting the runtime\n"
        '    os.chdir(f"{REPO}/nbs")  # relative paths (../recipes, images/) mean what they mean locally'
    )


def tpu_note_source() -> str:
    """The generic note on what changes on a TPU (a chapter that runs a model writes its own)."""
    return (f"{TPU_NOTE_MARKER} Runtime → Change runtime type → TPU. Any mesh this chapter builds comes from "
            "`jax.device_count()`, so it spans the chips there are (one on a v5e-1, eight on a v2-8). The hidden "
            "set-up cells stay as they are: the eight fake devices of `XLA_FLAGS` only shape JAX's CPU backend, "
            "and `runtime.tune_host_allocator()` does nothing off the CPU backend.")


def _source(cell) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _set_source(cell, text: str) -> None:
    cell["source"] = text


def _code_cell(source: str) -> dict:
    import nbformat

    return nbformat.v4.new_code_cell(source)


def _markdown_cell(source: str) -> dict:
    import nbformat

    return nbformat.v4.new_markdown_cell(source)


def is_install_cell(cell) -> bool:
    """Whether `cell` is an install cell (code that checks for Colab and pip-installs)."""
    src = _source(cell)
    return cell["cell_type"] == "code" and INSTALL_MARKER in src and "pip" in src


def _extra_packages(src: str) -> tuple:
    """Extra pip packages an existing install cell names after the repository (kept on rewrite)."""
    for line in src.splitlines():
        if "pip" in line and "install" in line:
            if "REPO" in line:  # our own form: a list of quoted args after REPO
                tail = line.split("REPO", 1)[1]
                return tuple(re.findall(r"""["']([^"']+)["']""", tail))
            m = re.search(r"pip install\s+(.*?)[\"')]*\s*$", line)  # an older shell-string form
            if m:
                words = [w for w in m.group(1).split() if not w.startswith("-")]
                return tuple(w for w in words if "tunix-from-the-inside" not in w and w != ".")
    return ()


def _first_working_code_index(cells) -> int:
    """Index of the first code cell that is more than nbdev directives (where the install cell goes)."""
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "code" and not _DIRECTIVE_ONLY.match(_source(cell)) and not is_install_cell(cell):
            return i
    return len(cells)


def absolute_image_url(url: str, nb_path: Path) -> str:
    """`url` (a relative image link in `nb_path`) as the raw URL of that repository file; unchanged if not one."""
    if _ABSOLUTE.match(url):
        return url
    path, sep, rest = url.partition("?")
    rel_dir = nb_path.resolve().parent.relative_to(ROOT).as_posix() if nb_path.resolve().is_relative_to(ROOT) else "nbs"
    target = posixpath.normpath(posixpath.join(rel_dir, path))
    if target.startswith("../") or target == "..":
        return url  # outside the repository: leave it (check_notebook reports it)
    return raw_base() + target


def rewrite_images(text: str, nb_path: Path) -> str:
    """Markdown `text` with every relative image link (Markdown or <img>) made absolute."""
    text = _IMAGE_MD.sub(lambda m: m.group(1) + absolute_image_url(m.group(2), nb_path) + m.group(3), text)
    return _IMAGE_HTML.sub(lambda m: m.group(1) + absolute_image_url(m.group(2), nb_path) + m.group(3), text)


EXPORT_CELL = '#| hide\n#| eval: false\nif "google.colab" not in sys.modules:  # the book\'s build step: on Colab there is no source tree to export from\n    from nbdev import nbdev_export\n\n    nbdev_export()'  # the closing nbdev_export cell, harmless when Colab runs every cell
_BARE_EXPORT = re.compile(r"^#\s*\|\s*hide\s*\n#\s*\|\s*eval:\s*false\s*\nfrom nbdev import nbdev_export\s*\nnbdev_export\(\)\s*$")


def make_ready(nb: dict, nb_path: Path, extra: tuple = ()) -> list:
    """Fix `nb` in place (install cell, image links, TPU note); a list of what was changed."""
    cells, changes = nb["cells"], []
    installs = [i for i, c in enumerate(cells) if is_install_cell(c)]
    kept_extra = tuple(dict.fromkeys(
        sum((_extra_packages(_source(cells[i])) for i in installs), ()) + tuple(extra)))
    want = install_source(kept_extra)
    for i in reversed(installs[1:]):  # one install cell only
        del cells[i]
        changes.append("removed a second install cell")
    target = _first_working_code_index(cells)
    if installs:
        i = installs[0]
        if _source(cells[i]) != want:
            _set_source(cells[i], want)
            changes.append("rewrote the install cell")
        if i > target:  # after code that may import the package: move it up
            cells.insert(target, cells.pop(i))
            changes.append("moved the install cell before the first working code cell")
    else:
        cells.insert(target, _code_cell(want))
        changes.append("added the install cell")
    install_at = next(i for i, c in enumerate(cells) if is_install_cell(c))
    if not any(c["cell_type"] == "markdown" and TPU_NOTE_MARKER in _source(c) for c in cells):
        cells.insert(install_at + 1, _markdown_cell(tpu_note_source()))
        changes.append("added the TPU note (generic: name the chapter's dtype, mesh and batch)")
    for cell in cells:
        if cell["cell_type"] == "code" and _BARE_EXPORT.match(_source(cell)):
            _set_source(cell, EXPORT_CELL)  # Colab runs it too, and has no nbdev
            changes.append("guarded the nbdev_export cell for Colab")
        if cell["cell_type"] == "markdown":
            new = rewrite_images(_source(cell), nb_path)
            if new != _source(cell):
                _set_source(cell, new)
                changes.append("made image links absolute")
    return changes


# ---- checks ------------------------------------------------------------------------------------------


def _parse(src: str):
    """The AST of a cell, with IPython magics and shell escapes blanked; None if it still does not parse."""
    lines = ["" if re.match(r"^\s*[!%]", line) else line for line in src.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _int_literal(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _call_name(node) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _mentions_devices(node) -> bool:
    """Whether an expression reads a device list (`jax.devices()`, a name ending in 'devices')."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and _call_name(sub) in ("devices", "local_devices"):
            return True
        if isinstance(sub, ast.Name) and sub.id.lower().endswith("devices"):
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "devices":
            return True
    return False


def device_problems(src: str) -> list:
    """Hard-coded device indices and counts in one code cell's source (a list of short descriptions)."""
    tree = _parse(src)
    if tree is None:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _mentions_devices(node.value):
            s = node.slice
            if _int_literal(s) and s.value != 0:  # [0] is the default device, present everywhere
                found.append(f"device index [{s.value}]: {ast.unparse(node)}")
            elif isinstance(s, ast.Slice) and any(_int_literal(b) and b.value != 0 for b in (s.lower, s.upper)) \
                    and not (s.lower is None and _int_literal(s.upper) and s.upper.value == 1):  # [:1]: the default device
                found.append(f"device count by slice: {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            sizes = list(node.args) + [k.value for k in node.keywords if k.arg not in ("devices", "axis_names")]
            if name == "make_mesh" and sizes and all(_int_literal(a) for a in sizes):
                product = 1
                for a in sizes:
                    product *= a.value
                if product > 1:
                    found.append(f"mesh of literal size: {ast.unparse(node)}")
            elif any(k.arg in _PARALLEL_KWARGS and _int_literal(k.value) and k.value.value > 1 for k in node.keywords):
                found.append(f"parallel size by literal: {ast.unparse(node)[:120]}")
            elif name == "reshape" and isinstance(node.func, ast.Attribute) and _mentions_devices(node.func.value):
                args = node.args[0].elts if len(node.args) == 1 and isinstance(node.args[0], ast.Tuple) else node.args
                if args and all(_int_literal(a) for a in args):
                    found.append(f"device grid of literal shape: {ast.unparse(node)}")
            elif name == "create_device_mesh" and node.args and isinstance(node.args[0], (ast.Tuple, ast.List)) \
                    and all(_int_literal(a) for a in node.args[0].elts):
                found.append(f"device mesh of literal shape: {ast.unparse(node)}")
    return found


def _loads_a_model(tree) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if _call_name(node) in MODEL_LOADERS:
                return True
            if isinstance(f, ast.Attribute) and f.attr == "load" and isinstance(f.value, ast.Name) and f.value.id == "tiny":
                return True
    return False


def _assigns_model(tree) -> bool:
    return any(isinstance(n, (ast.Assign, ast.AnnAssign))
               and any(isinstance(t, ast.Name) and t.id == "MODEL" for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
               for n in tree.body)


def _reads_model(tree) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "MODEL" and isinstance(n.ctx, ast.Load) for n in ast.walk(tree))


# ---- packages: what a notebook imports or names, against what its install cell installs ------------------------

JUPYTER_MODULES = {"IPython", "ipykernel", "ipywidgets", "traitlets", "jupyter_client", "google"}  # the runtime's own
IMPORT_NAMES = {"pyyaml": "yaml", "orbax-checkpoint": "orbax", "pillow": "PIL", "scikit-learn": "sklearn"}
# A name a cell may write that needs a package beyond the import lines: a real model's name needs llama.cpp's
# reader (its file is fetched by name on first use), and the hf rollout engine needs torch and transformers.
NAMED_NEEDS = {"gemma3-270m": ("gguf",), "smollm2-135m": ("gguf",)}
ENGINE_NEEDS = {"hf": ("torch", "transformers"), "vllm": ("vllm",), "sglang_jax": ("sgl_jax",)}  # RolloutConfig(engine=)
_EVAL_FALSE = re.compile(r"^\s*#\s*\|\s*eval\s*:\s*false\s*$", re.M)


def import_name(requirement: str) -> str:
    """The top-level module a pip requirement provides ('orbax-checkpoint>=1' -> 'orbax')."""
    dist = re.split(r"[<>=!~\[;\s]", requirement.strip(), 1)[0]
    return IMPORT_NAMES.get(dist.lower(), dist.replace("-", "_"))


def base_modules() -> set:
    """Modules the package's own install brings: its requirements (settings.ini) and the package itself."""
    cp = configparser.ConfigParser(delimiters=["="])
    cp.read(ROOT / "settings.ini")
    reqs = cp["DEFAULT"].get("requirements", "").split() if cp.defaults() else []
    return {import_name(r) for r in reqs} | {cp.defaults().get("lib_path", "tunix_lit")}


def _optional_imports(tree) -> set:
    """Nodes inside `try:` blocks that handle ImportError (or a wider error): optional by design."""
    wide = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is None or {getattr(n, "id", None) for n in ast.walk(h.type)} & wide for h in node.handlers):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def used_packages(nb: dict) -> dict:
    """{module: first cell index} for every non-optional third-party import and every named need, outside eval:false cells."""
    used = {}
    for i, cell in enumerate(nb["cells"]):
        src = _source(cell)
        if cell["cell_type"] != "code" or _EVAL_FALSE.search(src) or is_install_cell(cell):
            continue
        tree = _parse(src)
        if tree is None:
            continue
        optional = _optional_imports(tree)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import) and id(node) not in optional:
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and id(node) not in optional:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMED_NEEDS:
                names = list(NAMED_NEEDS[node.value])
            elif isinstance(node, ast.Call) and _call_name(node) == "RolloutConfig" and id(node) not in optional:
                names = [m for k in node.keywords if k.arg == "engine" and isinstance(k.value, ast.Constant)
                         for m in ENGINE_NEEDS.get(k.value.value, ())]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names:
                    used.setdefault(top, i)
    return used


def package_problems(nb: dict) -> list:
    """Packages a notebook uses that neither the package's install nor its install cell's extras bring."""
    installs = [c for c in nb["cells"] if is_install_cell(c)]
    extras = {import_name(p) for c in installs for p in _extra_packages(_source(c))}
    have = base_modules() | extras | JUPYTER_MODULES
    return [f"cell {i} uses {name!r}, which the install cell does not install (python tools/colab_ready.py "
            f"--extra PACKAGE adds it)" for name, i in used_packages(nb).items() if name not in have]


def check_notebook(nb: dict) -> list:
    """What keeps `nb` from running from its Colab badge: a list of problems (empty when ready)."""
    cells, problems = nb["cells"], []
    code = [(i, c) for i, c in enumerate(cells) if c["cell_type"] == "code"]
    installs = [i for i, c in code if is_install_cell(c)]
    if not installs:
        problems.append("no install cell (python tools/colab_ready.py adds it)")
    else:
        src = _source(cells[installs[0]])
        if re.search(r"^\s*[!%]", src, re.M):
            problems.append("the install cell uses a shell magic (! or %): notebooks stay plain Python")
        first_import = next((i for i, c in code if re.search(r"^\s*(from|import)\s+tunix_lit\b", _source(c), re.M)), None)
        if first_import is not None and installs[0] > first_import:
            problems.append(f"the install cell (cell {installs[0]}) comes after cell {first_import}, which imports tunix_lit")
    for i, c in enumerate(cells):
        if c["cell_type"] != "markdown":
            continue
        for rx in (_IMAGE_MD, _IMAGE_HTML):
            for m in rx.finditer(_source(c)):
                if not _ABSOLUTE.match(m.group(2)):
                    problems.append(f"cell {i}: relative image path {m.group(2)!r} (does not load from Colab)")
    for i, c in code:
        problems += [f"cell {i}: hard-coded {p}" for p in device_problems(_source(c))]
        if re.search(r"^\s*nbdev_export\(", _source(c), re.M) and INSTALL_MARKER.replace(
                " in ", " not in ") not in _source(c):
            problems.append(f"cell {i}: calls nbdev_export unguarded (Colab runs it without nbdev; "
                            "python tools/colab_ready.py guards it)")
    if installs:
        problems += package_problems(nb)
    first_load, setting = None, None
    for n, (i, c) in enumerate(code):
        tree = _parse(_source(c))
        if tree is None:
            continue
        if setting is None and _assigns_model(tree):
            setting = (n, i)
        if first_load is None and not _EXPORT.search(_source(c)) and _loads_a_model(tree):
            first_load = i
    if first_load is not None:
        if setting is None:
            problems.append(f"cell {first_load} loads a model but the notebook has no MODEL setting")
        elif setting[0] >= MODEL_TOP_CELLS or setting[1] > first_load:
            problems.append(f"the MODEL setting (cell {setting[1]}) is not at the top, before the first load (cell {first_load})")
        else:
            readers = [i for i, c in code if i != setting[1] and (t := _parse(_source(c))) is not None and _reads_model(t)]
            if not readers:
                problems.append("MODEL is set but no cell reads it: changing it would switch nothing")
    return problems


def main(argv=None) -> int:
    """Command line: fix each notebook named (or only check it with --check) and print what remains."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook has a problem")
    parser.add_argument("--extra", action="append", default=[], help="another pip package the install cell adds")
    args = parser.parse_args(argv)
    import nbformat

    bad = 0
    for path in args.notebooks:
        if path.suffix != ".ipynb" or not path.is_file():
            parser.error(f"not a notebook file: {path}")
        nb = nbformat.read(path, as_version=4)
        if not args.check:
            changes = make_ready(nb, path, tuple(args.extra))
            if changes:
                nbformat.write(nb, path)
            print(f"{path}: {'; '.join(dict.fromkeys(changes)) if changes else 'already ready'}")
        problems = check_notebook(nb)
        bad += bool(problems)
        for p in problems:
            print(f"{path}: needs a human: {p}")
    return 1 if bad and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
