"""Figures in prose come from results: every marked figure equals its source, and no result is typed unmarked.

A figure that README.md, CONTRIBUTING.md, chapters/*.md or a notebook's markdown quotes from a
result stored elsewhere is wrapped in `<!--fig:NAME-->...<!--/fig-->`, and `figures.yaml` says
where NAME's value lives (a stored notebook output, a run record in `recipes/results/`, a text file).
Here every marker of every one of those files is re-rendered from its source and compared with
the text, and the run records are checked against the recipe files they were made from.
Nothing is executed: notebooks are read as stored (seconds for the whole book).
"""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


figures = _tool("figures")
record_runs = _tool("record_runs")
FILES = figures.prose_files(ROOT)


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_every_marked_figure_equals_its_source(path):
    problems = figures.check(ROOT, [path])
    assert not problems, "\n".join(problems)


def test_the_book_is_covered():
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"README.md", "CONTRIBUTING.md"} <= names
    assert {p.relative_to(ROOT).as_posix() for p in (ROOT / "chapters").glob("*.md")} <= names
    assert {p.relative_to(ROOT).as_posix() for p in (ROOT / "nbs").glob("*.ipynb")} <= names


def test_every_registered_figure_resolves():
    registry = figures.load_registry(ROOT)
    assert registry, "figures.yaml registers no figure"
    for name, entry in registry.items():
        figures.render(entry, name, ROOT)  # raises, naming the figure, when its source lost it


def test_every_marker_names_a_registered_figure_and_is_used():
    registry, used = figures.load_registry(ROOT), set()
    for path in FILES:
        for _, text in figures.prose_blocks(path):
            used |= {m.group(1) for m in figures.MARKER.finditer(text)}
    assert used <= set(registry), f"markers name unregistered figures: {sorted(used - set(registry))}"
    assert set(registry) <= used, f"registered but quoted nowhere: {sorted(set(registry) - used)}"


# the stored runs of the tiny recipes (record_runs.py); the real models' records (real_*.json, several seeds or an
# earlier notebook run) are checked by tests/test_real_recipes.py
RECORDS = sorted(p for p in (ROOT / "recipes" / "results").glob("*.json") if not p.stem.startswith("real_"))


@pytest.mark.parametrize("record", RECORDS, ids=[p.stem for p in RECORDS])
def test_a_stored_run_matches_its_recipe_files(record):
    rec = json.loads(record.read_text())
    now = record_runs.recipe_hashes(record.stem)
    assert rec["recipe_sha256"] == now, (f"{record.name} was run from other recipe files than today's "
                                         f"{sorted(now)}; run `python tools/record_runs.py {record.stem}`")
    s = rec["summary"]
    assert s["heldout_accuracy_after"] > s["heldout_accuracy_before"], f"{record.stem}'s stored run got worse"


# --- the checker itself: it must fail on a changed number, and on a changed source


def _book(tmp_path, prose: str, output: str):
    """A one-notebook book whose prose quotes a value that one stored cell output prints."""
    (tmp_path / "nbs").mkdir()
    (tmp_path / "chapters").mkdir()
    nb = {"cells": [{"cell_type": "code", "id": "c1", "source": "summary", "metadata": {}, "execution_count": 1,
                     "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                  "data": {"text/plain": output}}]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nbs" / "00_x.ipynb").write_text(json.dumps(nb))
    (tmp_path / "figures.yaml").write_text(
        "x.after: {source: nbs/00_x.ipynb, cell: c1, key: 'figure.after', show: '{v*100:.1f}'}\n"
        "x.steps: {source: nbs/00_x.ipynb, match: 'steps.: (\\d+)', show: '{v}'}\n")
    (tmp_path / "README.md").write_text(prose)
    return tmp_path


GOOD = "from 41.0 % to <!--fig:x.after-->75.8<!--/fig--> % in <!--fig:x.steps-->400<!--/fig--> steps"
OUTPUT = "{'steps': 400, 'figure': {'before': 0.41015625, 'after': 0.7578125}}"


def test_the_checker_passes_a_figure_that_agrees(tmp_path):
    assert figures.check(_book(tmp_path, GOOD, OUTPUT)) == []


def test_the_checker_fails_on_a_typed_number_that_differs(tmp_path):
    problems = figures.check(_book(tmp_path, GOOD.replace("75.8", "78.1"), OUTPUT))
    assert len(problems) == 1 and "'78.1'" in problems[0] and "'75.8'" in problems[0]


def test_the_checker_fails_when_the_stored_result_changes(tmp_path):
    problems = figures.check(_book(tmp_path, GOOD, OUTPUT.replace("0.7578125", "0.78125").replace("400", "300")))
    assert len(problems) == 2 and "'78.1'" in problems[0] and "'300'" in problems[1]


def test_the_checker_fails_on_an_unregistered_name(tmp_path):
    problems = figures.check(_book(tmp_path, GOOD + " <!--fig:x.typo-->1<!--/fig-->", OUTPUT))
    assert problems and "x.typo" in problems[0]


def test_write_re_renders_from_the_source(tmp_path):
    root = _book(tmp_path, GOOD.replace("75.8", "78.1"), OUTPUT)
    assert figures.write(root) == [root / "README.md"]
    assert (root / "README.md").read_text() == GOOD and figures.check(root) == []


def test_a_before_after_pair_typed_outside_a_marker_is_found(tmp_path):
    root = _book(tmp_path, "it went 41.0 % → 78.1 %, and " + GOOD + "; `0.1 -> 0.2` is code", OUTPUT)
    found = figures.unmarked_claims(root / "README.md")
    assert [f.split(": ", 1)[1] for f in found] == ["41.0 % → 78.1"]


# Prose files still holding typed before -> after results, with how many. New prose must mark its
# figures (or, in a notebook, render them from the cell's values), so a count may only fall.
UNMARKED_CLAIMS_LEFT = {
    "nbs/13b_tiny_world.ipynb": 1,
    "nbs/15_sampler.ipynb": 1,
}


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_no_new_typed_before_after_results(path):
    found = figures.unmarked_claims(path)
    allowed = UNMARKED_CLAIMS_LEFT.get(path.relative_to(ROOT).as_posix(), 0)
    assert len(found) <= allowed, ("typed before -> after figures; mark them (figures.yaml) or render them from "
                                   "the cell's values:\n" + "\n".join(found))


# --- one run, one set of figures: the main job (`tunix-lit train recipes/grpo_tiny.yaml`) has one record,
# recipes/results/grpo_tiny.json, and every place that quotes its result quotes that record through the
# run.grpo_tiny.* markers. A place that quotes the main job is registered here; its markers are checked above.
MAIN_JOB_RECORD = "recipes/results/grpo_tiny.json"
MAIN_JOB_QUOTED_IN = {
    "README.md": {"run.grpo_tiny.before", "run.grpo_tiny.after", "run.grpo_tiny.steps", "run.grpo_tiny.train_s"},
    "CONTRIBUTING.md": {"run.grpo_tiny.after"},
    "chapters/00_run_it_first.md": {"run.grpo_tiny.before", "run.grpo_tiny.after", "run.grpo_tiny.steps",
                                    "run.grpo_tiny.train_s"},
    "chapters/32_grpo_learner.md": {"run.grpo_tiny.before", "run.grpo_tiny.after"},
    "chapters/40_rollout_backends.md": {"run.grpo_tiny.before", "run.grpo_tiny.after"},
    "nbs/00_run_it_first.ipynb": {"run.grpo_tiny.before", "run.grpo_tiny.after", "run.grpo_tiny.train_s"},
    "nbs/32_grpo.ipynb": {"run.grpo_tiny.before", "run.grpo_tiny.after"},
    "nbs/72_recipes.ipynb": {"run.grpo_tiny.before", "run.grpo_tiny.after", "run.grpo_tiny.train_s"},
}


def _markers(path: Path) -> set:
    return {m.group(1) for _, text in figures.prose_blocks(path) for m in figures.MARKER.finditer(text)}


def test_the_main_job_is_quoted_from_its_one_record():
    registry = figures.load_registry(ROOT)
    main = {n: e for n, e in registry.items() if n.startswith("run.grpo_tiny.")}
    assert {"run.grpo_tiny.before", "run.grpo_tiny.after", "run.grpo_tiny.train_s"} <= set(main)
    assert all(e["source"] == MAIN_JOB_RECORD for e in main.values()), "every run.grpo_tiny.* figure reads the record"
    quoting = {p.relative_to(ROOT).as_posix() for p in FILES if _markers(p) & set(main)}
    assert quoting <= set(MAIN_JOB_QUOTED_IN), f"a new place quotes the main job; register it: {quoting - set(MAIN_JOB_QUOTED_IN)}"


@pytest.mark.parametrize("place", sorted(MAIN_JOB_QUOTED_IN))
def test_each_place_that_quotes_the_main_job_reads_the_record(place):
    path = ROOT / place
    missing = MAIN_JOB_QUOTED_IN[place] - _markers(path)
    assert not missing, f"{place} quotes the main job without the record's markers {sorted(missing)}"
    # and its held-out accuracy is never typed beside them: outside a marker, the record's figure does not appear
    after = figures.render(figures.load_registry(ROOT)["run.grpo_tiny.after"], "run.grpo_tiny.after", ROOT)
    for where, text in figures.prose_blocks(path):
        plain = figures.MARKER.sub("", text)
        assert not re.search(rf"(?<![\d.]){re.escape(after)}\s?%", plain), f"{where}: the main job's {after} % typed"
