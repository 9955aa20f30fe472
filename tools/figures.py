"""Figures in prose come from results: check every marked figure of the book against its source, or re-render it.

    python tools/figures.py            # check: list every marked figure that disagrees with its source (exit 1)
    python tools/figures.py --write    # re-render every marked figure from its source, in place
    python tools/figures.py --list     # every registered figure with its current value

A figure typed into prose (README.md, CONTRIBUTING.md, chapters/*.md, the markdown cells of nbs/*.ipynb)
is wrapped in an invisible marker naming an entry of `figures.yaml`:

    held-out accuracy went from <!--fig:grpo_full.before-->41.0 %<!--/fig--> to ...

and the entry says where the value lives and how the prose writes it:

    grpo_full.before:
      source: nbs/00_run_it_first.ipynb   # a notebook (its stored outputs), a .json file, or any text file
      cell: 4bdfeaf2                      # optional: only this cell's outputs (a notebook cell id)
      key: heldout_accuracy_before        # a path (a.b[0]) into the first Python/JSON literal holding it
      # or match: 'after (\\d+) steps'    # a regular expression: group 1 (or a tuple of all groups)
      show: "{v:.1%}"                     # a Python f-string over the value v: what the prose reads

Nothing is executed: notebooks are read as stored, so the check takes a second. Inside a notebook,
prose about a value the notebook itself computes is better rendered by the cell that computes it
(`Markdown(f"...")` in a `#| echo: false` cell); markers are for prose that quotes a result stored
elsewhere. `tests/test_prose_figures.py` runs the check and fails on any disagreement.
"""

import argparse
import ast
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = "figures.yaml"
MARKER = re.compile(r"<!--fig:([\w.\-]+)-->(.*?)<!--/fig-->", re.DOTALL)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_KEY_PART = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]")


def prose_files(root: Path = ROOT) -> list:
    """Every file whose prose may state a figure: README.md, CONTRIBUTING.md, benchmarks/README.md, chapters/*.md, nbs/*.ipynb."""
    files = [root / "README.md", root / "CONTRIBUTING.md", root / "benchmarks" / "README.md",
             *sorted((root / "chapters").glob("*.md")),
             *sorted((root / "nbs").glob("*.ipynb"))]
    return [f for f in files if f.exists()]


def prose_blocks(path: Path) -> list:
    """[(where, text)]: a markdown file whole, or each markdown cell of a notebook (where: 'file#cell-id')."""
    if path.suffix != ".ipynb":
        return [(path.name, path.read_text())]
    nb = json.loads(path.read_text())
    return [(f"{path.name}#{c.get('id', i)}", _text(c["source"]))
            for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"]


def _text(source) -> str:
    return source if isinstance(source, str) else "".join(source)


def load_registry(root: Path = ROOT) -> dict:
    """The registered figures: {name: {source, cell?, key? | match?, show}}, each entry checked for its fields."""
    path = root / REGISTRY
    entries = yaml.safe_load(path.read_text()) if path.exists() else {}
    for name, e in (entries or {}).items():
        if not isinstance(e, dict) or "source" not in e or "show" not in e or ("key" in e) == ("match" in e):
            raise ValueError(f"{REGISTRY}: figure {name!r} needs 'source', 'show' and exactly one of 'key' or "
                             f"'match'; got {e!r}")
    return entries or {}


def _outputs_text(cell) -> list:
    """The texts a stored cell shows: stream text, and each rich output's markdown or plain text."""
    texts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            texts.append(_text(o.get("text", "")))
        elif "data" in o:
            data = o["data"]
            for kind in ("text/markdown", "text/plain"):
                if kind in data:
                    texts.append(_text(data[kind]))
                    break
    return texts


_READ: dict = {}  # (path, mtime) -> parsed file: a check reads each source once


def _read(path: Path):
    key = (path, path.stat().st_mtime_ns)
    if key not in _READ:
        _READ[key] = json.loads(path.read_text()) if path.suffix == ".ipynb" else path.read_text()
    return _READ[key]


def _source_texts(root: Path, entry: dict, name: str) -> list:
    path = root / entry["source"]
    if not path.exists():
        raise ValueError(f"figure {name!r}: source {entry['source']!r} does not exist")
    if path.suffix != ".ipynb":
        return [_read(path)]
    cells = _read(path)["cells"]
    if "cell" in entry:
        cells = [c for c in cells if c.get("id") == str(entry["cell"])]
        if not cells:
            raise ValueError(f"figure {name!r}: {entry['source']} has no cell with id {entry['cell']!r}")
    return [t for c in cells if c["cell_type"] == "code" for t in _outputs_text(c)]


def _literals(text: str):
    """Python or JSON literals in a text: the whole text, then each line."""
    for chunk in [text, *text.splitlines()]:
        chunk = chunk.strip()
        for parse in (ast.literal_eval, json.loads):
            try:
                yield parse(chunk)
                break
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue


def _follow(value, key: str):
    for part, index in _KEY_PART.findall(key):
        if part:
            if not isinstance(value, dict) or part not in value:
                raise KeyError(part)
            value = value[part]
        else:
            value = value[int(index)]
    return value


def _number(s: str):
    try:
        return int(s.replace(",", ""))
    except ValueError:
        try:
            return float(s.replace(",", ""))
        except ValueError:
            return s


def value_of(entry: dict, name: str = "?", root: Path = ROOT):
    """The figure's current value, read from its source (a stored notebook output, a JSON or text file)."""
    texts = _source_texts(root, entry, name)
    if "match" in entry:
        pattern = re.compile(entry["match"], re.MULTILINE)
        for text in texts:
            m = pattern.search(text)
            if m:
                groups = tuple(_number(g) for g in m.groups())
                return groups[0] if len(groups) == 1 else groups
        raise ValueError(f"figure {name!r}: no output of {entry['source']} matches {entry['match']!r}")
    if Path(entry["source"]).suffix == ".json" and "cell" not in entry:
        return _follow(json.loads(texts[0]), entry["key"])
    for text in texts:
        for lit in _literals(text):
            try:
                return _follow(lit, entry["key"])
            except (KeyError, IndexError, TypeError):
                continue
    raise ValueError(f"figure {name!r}: no literal in the outputs of {entry['source']} has the key {entry['key']!r}")


def render(entry: dict, name: str = "?", root: Path = ROOT) -> str:
    """What the prose must read for this figure: its `show` f-string applied to its current value."""
    v = value_of(entry, name, root)
    return eval("f" + repr(entry["show"]), {"__builtins__": {"abs": abs, "round": round, "len": len, "min": min, "max": max, "int": int, "float": float}}, {"v": v})


def check(root: Path = ROOT, files=None) -> list:
    """Every problem with the marked figures: an unknown name, or text that differs from the rendered value."""
    registry, problems, cache = load_registry(root), [], {}
    for path in files if files is not None else prose_files(root):
        for where, text in prose_blocks(path):
            for m in MARKER.finditer(text):
                name, shown = m.group(1), m.group(2)
                if name not in registry:
                    problems.append(f"{where}: marker names {name!r}, which {REGISTRY} does not register")
                    continue
                try:
                    want = cache[name] if name in cache else cache.setdefault(name, render(registry[name], name, root))
                except (ValueError, KeyError) as err:
                    problems.append(f"{where}: {err}")
                    continue
                if shown != want:
                    problems.append(f"{where}: figure {name!r} reads {shown!r} but its source gives {want!r} "
                                    f"(python tools/figures.py --write re-renders it)")
    return problems


def _rewrite(text: str, registry: dict, root: Path) -> str:
    def one(m):
        try:
            return f"<!--fig:{m.group(1)}-->{render(registry[m.group(1)], m.group(1), root)}<!--/fig-->"
        except (KeyError, ValueError):  # unknown name or a source without the value: left as it is, and `check` says why
            return m.group(0)

    return MARKER.sub(one, text)


def write(root: Path = ROOT) -> list:
    """Re-render every marked figure from its source, in place; the files changed."""
    registry, changed = load_registry(root), []
    for path in prose_files(root):
        if path.suffix != ".ipynb":
            text = path.read_text()
            new = _rewrite(text, registry, root)
            if new != text:
                path.write_text(new)
                changed.append(path)
            continue
        import nbformat

        nb = nbformat.read(path, as_version=4)
        dirty = False
        for cell in nb.cells:
            if cell.cell_type == "markdown" and "<!--fig:" in cell.source:
                new = _rewrite(cell.source, registry, root)
                dirty, cell.source = dirty or new != cell.source, new
        if dirty:
            nbformat.write(nb, path)
            changed.append(path)
    return changed


# A "before -> after" pair of numbers in prose is a result; typed, it drifts from the run it came from.
_NUM = r"[+−-]?\d(?:[\d,]*\d)?(?:\.\d+)?"
RESULT_CLAIM = re.compile(rf"{_NUM}\s?%?\s?(?:→|->)\s?(?:about\s)?{_NUM}"  # 41.0 % → 75.8 %, 0.539 -> 0.168
                          rf"|{_NUM}\s?%\s(?:to|and)\s(?:about\s)?{_NUM}\s?%")  # from 41.0 % to 75.8 %


def unmarked_claims(path: Path) -> list:
    """Before -> after number pairs in a file's prose outside any marker and outside code blocks and spans."""
    found = []
    for where, text in prose_blocks(path):
        text = MARKER.sub("FIG", _FENCE.sub("", text))
        text = re.sub(r"`[^`\n]*`", "", text)
        found += [f"{where}: {m.group(0)}" for m in RESULT_CLAIM.finditer(text)]
    return found


def main(argv=None) -> int:
    """Check (default), re-render (--write) or list (--list) the book's marked figures; exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="re-render every marked figure from its source")
    parser.add_argument("--list", action="store_true", help="print every registered figure and its value")
    args = parser.parse_args(argv)
    if args.list:
        for name, entry in load_registry().items():
            try:
                shown = repr(render(entry, name))
            except (KeyError, ValueError) as err:
                shown = f"(unresolved: {err})"
            print(f"{name:40s} {shown:>14}  from {entry['source']}")
        return 0
    if args.write:
        for path in write():
            print(f"re-rendered {path.relative_to(ROOT)}")
    problems = check()
    print("\n".join(problems) or "every marked figure agrees with its source")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
