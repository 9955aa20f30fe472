"""The map of the book (chapters/README.md) is the one source of chapter status, and it agrees with the repository."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "chapters" / "README.md"
ROW = re.compile(r"^\|(?P<read>[^|]+)\|\s*(?P<kind>prose|notebook)\s*\|[^|]*\|\s*(?P<status>[^|]+?)\s*\|\s*$")
STATUSES = ("written", "in progress", "planned")


def _rows():
    """(phase, text of the 'read' column, linked repository path or None, status) for each table row of the map."""
    phase, out = None, []
    for line in MAP.read_text().splitlines():
        m = re.match(r"^###\s+Phase\s+(\d+)", line)
        if m:
            phase = int(m.group(1))
            continue
        row = ROW.match(line)
        if row and phase is not None:
            link = re.search(r"\]\(([^)#]+)\)", row["read"])
            path = (MAP.parent / link.group(1)).resolve().relative_to(ROOT).as_posix() if link else None
            out.append((phase, row["read"].strip(), path, row["status"]))
    return out


def test_every_row_has_a_known_status_and_planned_rows_link_nothing():
    rows = _rows()
    assert len(rows) > 20
    for phase, read, path, status in rows:
        assert status in STATUSES, f"{read}: status {status!r} is not one of {STATUSES}"
        if status == "written":
            assert path and (ROOT / path).is_file(), f"{read}: marked written but {path} does not exist"
        if status == "planned":
            assert path is None, f"{read}: marked planned but links {path}"


def test_every_chapter_in_the_repository_is_on_the_map_in_its_phase():
    listed = {path: phase for phase, _, path, _ in _rows() if path}
    files = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))]
    files += [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "chapters").glob("[0-9]*.md"))]
    for f in files:
        assert f in listed, f"{f} is not on the map (chapters/README.md)"
        if f.startswith("nbs/"):
            assert listed[f] == int(Path(f).name[0]), f"{f} is listed under phase {listed[f]}"


def test_chapters_carry_no_status_labels_of_their_own():
    # a chapter links the next one plainly; only the map says what is written, in progress or planned
    label = re.compile(r"\]\([^)]*\.(?:ipynb|md)\)\s*\((?:planned|in progress)\)")
    for nb in sorted((ROOT / "nbs").glob("[0-9]*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                assert not label.search(text), f"{nb.name}: {label.search(text).group(0)}"
    for md in sorted((ROOT / "chapters").glob("[0-9]*.md")):
        found = label.search(md.read_text())
        assert not found, f"{md.name}: {found.group(0)}"
