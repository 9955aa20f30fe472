"""The book never speaks of how it was made, and shows no machine's absolute paths.

Scans what a reader reads: every notebook in `nbs/` (markdown and code sources, and the stored outputs:
streams, rich text, tracebacks), `chapters/*.md`, `README.md`, `CONTRIBUTING.md` and
`benchmarks/README.md`. Two kinds of words fail:

- **words of the team's process:** a machine lent for a while ("loan", "the seventh loan", "a lent TPU
  machine"), working sessions ("the fifth session", "this session"), refused machine requests ("three
  refusals cost 6 minutes"), and machine nicknames ("Machine T", "machine A's kind", "A?", "cpuA").
  A machine is named by what it is: "TPU v5e, one chip", "2-core CPU with AVX-512".
- **absolute paths of a machine:** a developer's checkout or home (`/work/...`, `/root/...`,
  `/home/<user>/...`), an installed package's location (`.../site-packages/...`), and, in prose and
  stored outputs, a temporary folder (`/tmp/tmpab12cd/...`): an output should show a path relative to
  something the reader knows (the run directory, the repository), not where one machine put it.

The words are matched in their team sense only: a POSIX process session (`setsid`, `--new-session`, a
session keyring) and a program's refusal of bad input are the book's subject, not its process.
Figure markers' names (`<!--fig:cpuA.f.grpo.ratio-->`) are not prose and are skipped.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_ORDINAL = (r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
            r"thirteenth|\d+(?:st|nd|rd|th)|next|previous|last|later|earlier|same|this|that|one|each|every|another")
PROCESS_WORDS = {
    "a loan of a machine": re.compile(r"\b[Ll]oan(?:s|ed)?\b|\blent\s+(?:\w+\s+)?(?:machine|TPU|GPU|chip|H200)s?\b"),
    "a working session": re.compile(rf"\b(?:{_ORDINAL})\s+sessions?\b(?!\s+(?:keyring|leader|id)\b)|"
                                    r"\bsessions?\s+(?:before|after|ago)\b|\b(?:in|during|of)\s+(?:the|this|a)\s+session\b(?!\s+(?:keyring|leader|id)\b)",
                                    re.I),
    "a refused machine request": re.compile(r"\brefusals?\s+(?:cost|of\s+(?:a|the)\s+(?:machine|device|TPU|GPU))\b|"
                                            r"\brefused\s+(?:a|the|another)\s+(?:machine|device|TPU|GPU)\b", re.I),
    "a machine nickname": re.compile(r"\b[Mm]achines?\s+[A-Z](?![\w-])|(?<![\w])A\?|\bcpuA\b"),
}
_HOME = r"/home/(?!sandbox\b)[\w.-]+/"  # a user's home; the sandbox's own /home/sandbox is the chapter's subject
PATH_ANYWHERE = re.compile(rf"(?<![\w.~$-])(?:/work/|/root/|{_HOME})\S*|\S*/site-packages/\S*")
PATH_IN_PROSE_AND_OUTPUTS = re.compile(rf"(?<![\w.~$-])(?:/work/|/root/|{_HOME}|/tmp/\w)\S*|\S*/site-packages/\S*")
FIG_MARKER = re.compile(r"<!--/?fig(?::[\w.\-]+)?-->")


def book_files(root: Path = ROOT) -> list:
    """Every file a reader of the book reads: the notebooks, the chapters, the front pages, the benchmarks page."""
    files = [*sorted((root / "nbs").glob("*.ipynb")), *sorted((root / "chapters").glob("*.md")),
             root / "README.md", root / "CONTRIBUTING.md", root / "benchmarks" / "README.md"]
    return [f for f in files if f.exists()]


def _text(x) -> str:
    return x if isinstance(x, str) else "".join(x)


def blocks(path: Path) -> list:
    """[(where, kind, text)]: a Markdown file whole (kind 'prose'), or each notebook cell's source ('prose' for
    markdown, 'code' for code) and each of its stored outputs ('output')."""
    if path.suffix != ".ipynb":
        return [("", "prose", path.read_text())]
    out = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        where = f"cell {i} ({cell.get('id', '?')})"
        out.append((f"{where} {cell['cell_type']}", "prose" if cell["cell_type"] == "markdown" else "code",
                    _text(cell.get("source", ""))))
        for o in cell.get("outputs", []):
            if "text" in o:
                out.append((f"{where} output", "output", _text(o["text"])))
            if "traceback" in o:
                out.append((f"{where} traceback", "output", "\n".join(o["traceback"])))
            for mime, value in o.get("data", {}).items():
                if mime.startswith("text/"):
                    out.append((f"{where} output {mime}", "output", _text(value)))
    return out


def problems(path: Path, root: Path = ROOT) -> list:
    """'file cell line: what: the words' for each process word or machine path in one file."""
    found, name = [], path.relative_to(root).as_posix()
    for where, kind, text in blocks(path):
        text = FIG_MARKER.sub("", text)
        paths = PATH_ANYWHERE if kind == "code" else PATH_IN_PROSE_AND_OUTPUTS
        for n, line in enumerate(text.splitlines(), 1):
            hits = [(what, m.group(0)) for what, rx in PROCESS_WORDS.items() for m in rx.finditer(line)]
            hits += [("an absolute path of a machine", m.group(0)) for m in paths.finditer(line)]
            found += [f"{name} {where} line {n}: {what}: {words!r}" for what, words in hits]
    return found


FILES = book_files()


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_the_book_speaks_of_its_subject_not_of_how_it_was_made(path):
    found = problems(path)
    assert not found, ("words of the team's process or a machine's paths (name a machine by what it is; show "
                       "paths relative to the run directory or the repository; re-run a notebook whose outputs "
                       "hold them):\n" + "\n".join(found))


def test_the_scan_covers_the_book():
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"README.md", "CONTRIBUTING.md", "benchmarks/README.md"} <= names
    assert sum(n.startswith("nbs/") for n in names) > 20 and sum(n.startswith("chapters/") for n in names) > 5


# --- the scanner itself: each kind of word is caught where it is, and the subject's own words are not


def _nb(tmp_path, cells):
    (tmp_path / "nbs").mkdir(exist_ok=True)
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "nbs" / "99_demo.ipynb"
    path.write_text(json.dumps(nb))
    return path


@pytest.mark.parametrize("line", [
    "Measured in the seventh loan of the TPU machine.", "The host of a lent TPU machine has AVX2.",
    "Loans 7-12 come first.", "as measured in the fifth session", "this session's TPU calls",
    "Machine T, one chip", "on machine A's kind", "a figure from A? in 2026", "the cpuA rows",
    "three refusals cost about 6 minutes", "see /work/main/tunix_lit/rl/learner.py:495",
    "/root/.cache/tunix_lit holds it", "/home/alice/data", "run directory /tmp/tmpab12cd/grpo",
    ".../python3.11/site-packages/jax/_src/x.py:12: UserWarning",
])
def test_each_kind_is_caught(tmp_path, line):
    path = tmp_path / "chapter.md"
    path.write_text(f"Some prose.\n\n{line}\n")
    found = problems(path, tmp_path)
    assert len(found) >= 1 and "line 3" in found[0], found


@pytest.mark.parametrize("line", [
    "each starts a session of its own, so a kill reaches the group", "`--new-session` and the session keyring",
    "the sandbox's session dies with PID 1", "the dtype refusal then asks for the other one",
    "a refusal, naming the leaf, of a checkpoint that does not match", "the `loader` loads it",
    "the machine this book is tested on", "a 2-core CPU with AVX-512", "`/proc/cpuinfo` says",
    "<!--fig:cpuA.f.grpo.ratio-->0.484<!--/fig-->×", "the sandbox's home is /home/sandbox",
    "Colab clones into /content/tunix-from-the-inside", "a run directory `runs/grpo_tiny/`",
])
def test_the_subjects_own_words_pass(tmp_path, line):
    path = tmp_path / "chapter.md"
    path.write_text(line + "\n")
    assert problems(path, tmp_path) == []


def test_a_notebook_is_named_by_cell_and_its_outputs_are_read(tmp_path):
    path = _nb(tmp_path, [
        {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": "# Demo\n\nAll clean."},
        {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": 1,
         "source": 'code = "open(\'/tmp/main.py\')"  # a path inside the sandbox: fine in code',
         "outputs": [{"output_type": "stream", "name": "stderr",
                      "text": "ok\n/work/main/tunix_lit/rl/learner.py:495: UserWarning: gap not measured\n"}]},
        {"cell_type": "code", "id": "c2", "metadata": {}, "execution_count": 2, "source": "summary",
         "outputs": [{"output_type": "execute_result", "execution_count": 2, "metadata": {},
                      "data": {"text/plain": "{'note': 'from Machine T'}"}}]},
    ])
    found = problems(path, tmp_path)
    assert len(found) == 2, found
    assert found[0].startswith("nbs/99_demo.ipynb cell 1 (c1) output line 2: an absolute path")
    assert found[1].startswith("nbs/99_demo.ipynb cell 2 (c2) output text/plain line 1: a machine nickname")
