"""Build the book as a static site, offline: `python tools/build_site.py` writes `_site/`.

What it does, in order:

1. Stages the pages into `_site_build/docs/`: `README.md` as the front page (its chapter table),
   `chapters/*.md` (`chapters/README.md`, the map, becomes "The map"), every `nbs/NN_*.ipynb`,
   `CONTRIBUTING.md`, `benchmarks/README.md`, their images, and the vendored assets in
   `tools/site_assets/` (KaTeX, an offline Colab badge).
2. Rewrites what only makes sense in the repository: a link to a repository file that is not a page
   (a module, a recipe, a folder) goes to that file on GitHub; a link to a chapter that does not
   exist yet becomes plain text (listed in `_site/missing_links.txt`); the Colab badge image comes
   from the site itself; a figure linked by its raw GitHub URL (so that it loads on Colab) is served
   from the site's own copy. In notebooks, nbdev's hidden cells (`#| hide`, `#| eval: false`) and
   the Colab install cell are dropped and the `#|` directive lines removed, as nbdev's own docs do. Nothing is executed: the
   stored outputs are what the site shows.
3. Builds the navigation by phase from the files present: a notebook `NN_name` belongs to phase
   `N` (its first digit), a prose chapter to the phase whose table in the map lists it (else its
   first digit); phase titles come from the map's `### Phase N: Title` headings. A phase lists
   its prose chapters first, then its notebooks in number order. New notebooks land in the right
   phase without editing anything.
4. Runs MkDocs (`mkdocs.yml` at the repository root: material theme without web fonts,
   mkdocs-jupyter with `execute: false`) into `_site/`.

`--out DIR` stages into `DIR/docs` and writes the site to `DIR/site` instead (the test builds into a
fresh folder of its own, so no other build, and nothing else that touches `_site/`, can change the
pages while it counts them). The pages of the repository are listed once, before staging, and that
list is what the summary reports as `sources`.
"""

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_site_build"
STAGE = BUILD / "docs"
ASSETS = ROOT / "tools" / "site_assets"
MAP = ROOT / "chapters" / "README.md"
BRANCH_URL = None  # filled from settings.ini: <git_url>/blob/<branch>

NOTEBOOK = re.compile(r"^(\d)(\d)[a-z]?_[\w-]+\.ipynb$")  # 10_model.ipynb, 13b_tiny_world.ipynb
PROSE = re.compile(r"^(\d)(\d)_[\w-]+\.md$")
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(\s+\"[^\"]*\")?\s*\)")
HTML_REF = re.compile(r"""(\b(?:src|href)=")([^"]+)(")""")
DIRECTIVE = re.compile(r"^\s*#\s*\|\s*([\w-]+)(?:\s*:\s*|\s+)?(.*?)\s*$")  # `#| eval: false`, `#| default_exp x.y`
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
COLAB_INSTALL = '"google.colab" in sys.modules'  # marks the install cell, which does nothing off Colab
OWN_RAW = re.compile(r"^https://(?:raw\.githubusercontent\.com/[^/]+/[^/]+/[^/]+|github\.com/[^/]+/[^/]+/(?:raw|blob)/[^/]+)/"
                     r"((?:nbs|chapters)/images/[^?#]+)(?:\?raw=true)?$")


def _settings() -> dict:
    """Key/values of settings.ini's [DEFAULT] section."""
    import configparser

    cp = configparser.ConfigParser()
    cp.read(ROOT / "settings.ini")
    return dict(cp["DEFAULT"])


def _pages() -> dict:
    """Repository path -> staged path of every page the site has (only files that exist)."""
    pages = {"README.md": "index.md"}
    for md in sorted((ROOT / "chapters").glob("*.md")):
        pages[f"chapters/{md.name}"] = f"chapters/{md.name}"
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        if NOTEBOOK.match(nb.name):
            pages[f"nbs/{nb.name}"] = f"nbs/{nb.name}"
    for extra in ("CONTRIBUTING.md", "benchmarks/README.md"):
        if (ROOT / extra).is_file():
            pages[extra] = extra
    return pages


def _html_name(staged: str) -> str:
    """The URL path MkDocs gives a staged page (use_directory_urls: false; README.md is its folder's index)."""
    p = Path(staged)
    stem = "index" if p.name in ("README.md", "index.md") else p.stem
    return str(p.with_name(stem + ".html"))


def _relative(target: str, source: str) -> str:
    """`target` (a staged path) as a relative URL from the page `source` (a staged path)."""
    src_dir = Path(source).parent
    t = Path(target)
    depth = len(src_dir.parts)
    common = 0
    while common < min(depth, len(t.parts) - 1) and src_dir.parts[common] == t.parts[common]:
        common += 1
    return "/".join([".."] * (depth - common) + list(t.parts[common:]))


class Rewriter:
    """Rewrites the links of one staged page; records links to chapters that do not exist yet."""

    def __init__(self, pages: dict, missing: list):
        self.pages, self.missing = pages, missing

    def target(self, url: str, repo_path: str, staged: str, *, for_notebook: bool, image: bool) -> str:
        """The URL the site should use for `url`, found in the repository file `repo_path`; None: unlink."""
        if url == COLAB_BADGE:
            return _relative("site_assets/colab-badge.svg", staged)
        own = OWN_RAW.match(url)  # a figure of this repository by absolute URL (for Colab): use the local copy
        if own and (ROOT / own.group(1)).is_file():
            url = _relative(own.group(1), repo_path)
        if re.match(r"^[a-z][a-z0-9+.-]*:", url, re.I) or url.startswith("#") or url.startswith("/"):
            return url
        path, _, anchor = url.partition("#")
        resolved = (ROOT / Path(repo_path).parent / path).resolve()
        try:
            rel = resolved.relative_to(ROOT).as_posix()
        except ValueError:
            self.missing.append(f"{repo_path}: {url} (outside the repository)")
            return None
        suffix = f"#{anchor}" if anchor else ""
        if rel in self.pages:
            page = self.pages[rel]
            if for_notebook:  # nbconvert does not resolve page links: point at the built .html
                return _relative(_html_name(page), staged) + suffix
            return _relative(page, staged) + suffix  # MkDocs resolves .md/.ipynb links itself
        if resolved.is_file() and (rel.startswith("nbs/images/") or rel.startswith("chapters/images/")) and image:
            return _relative(rel, staged) + suffix
        if resolved.is_file() and rel.startswith(("nbs/images/", "chapters/images/")):
            return _relative(rel, staged) + suffix  # a figure linked, not embedded: copied with the images
        if resolved.exists():  # a module, a recipe, a folder: show it on GitHub
            kind = "tree" if resolved.is_dir() else "blob"
            return f"{BRANCH_URL.replace('/blob/', f'/{kind}/')}/{quote(rel)}{suffix}"
        self.missing.append(f"{repo_path}: {url}")
        return None

    def markdown(self, text: str, repo_path: str, staged: str, *, for_notebook: bool = False) -> str:
        """`text` with every Markdown link and image (and HTML src/href) rewritten for the site."""

        def link(m):
            bang, label, url, title = m.group(1), m.group(2), m.group(3), m.group(4) or ""
            label = LINK.sub(link, label)  # a badge: an image inside a link
            new = self.target(url, repo_path, staged, for_notebook=for_notebook, image=bool(bang))
            if new is None:
                return label if not bang else ""
            return f"{bang}[{label}]({new}{title})"

        def html(m):
            new = self.target(m.group(2), repo_path, staged, for_notebook=for_notebook, image=True)
            return m.group(1) + (new if new is not None else "#") + m.group(3)

        # leave fenced code alone
        parts = re.split(r"(^```.*?^```[^\n]*$)", text, flags=re.M | re.S)
        for i in range(0, len(parts), 2):
            parts[i] = HTML_REF.sub(html, LINK.sub(link, parts[i]))
        return "".join(parts)


def _directives(source: str) -> tuple:
    """(nbdev directives of a code cell as {name: value}, the source without its directive lines)."""
    found, kept = {}, []
    for line in source.splitlines():
        m = DIRECTIVE.match(line)
        if m and not kept:
            found[m.group(1).lower()] = (m.group(2) or "").strip().lower()
        else:
            kept.append(line)
    return found, "\n".join(kept).strip("\n")


def stage_notebook(src: Path, staged: str, rw: Rewriter) -> None:
    """Copy a notebook for the site: hidden cells tagged away, directives stripped, links rewritten."""
    nb = json.loads(src.read_text())
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        tags = set(cell.setdefault("metadata", {}).get("tags", []))
        if cell["cell_type"] == "markdown":
            source = rw.markdown(source, f"nbs/{src.name}", staged, for_notebook=True)
        elif cell["cell_type"] == "code":
            found, source = _directives(source)
            colab_setup = COLAB_INSTALL in source and "pip" in source  # tools/colab_ready.py's install cell
            if "hide" in found or found.get("eval") == "false" or "default_exp" in found or not source.strip() or colab_setup:
                tags.add("remove_cell")
            if found.get("echo") == "false" or "hide_input" in found:
                tags.add("remove_input")
            if found.get("output") == "false" or "hide_output" in found:
                tags.add("remove_output")
        cell["source"] = source
        if tags:
            cell["metadata"]["tags"] = sorted(tags)
    (STAGE / staged).write_text(json.dumps(nb))


def _title(repo_path: str, readme_titles: dict) -> str:
    """A short nav title: "NN · name" for a notebook (the README table's name, else its H1 up to a colon), "Article · H1" for prose."""
    path = ROOT / repo_path
    if repo_path in readme_titles:
        h1 = readme_titles[repo_path]
    elif path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        text = next(("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"), "")
        h1 = next((l[2:] for l in text.splitlines() if l.startswith("# ")), path.stem)
    else:
        h1 = next((l[2:] for l in path.read_text().splitlines() if l.startswith("# ")), path.stem)
    h1 = h1.split(":")[0].strip()
    if path.suffix == ".md":  # a prose chapter shares its number with a notebook: name its kind instead
        return f"Article · {h1}" if repo_path.startswith("chapters/") and PROSE.match(path.name) else h1
    number = re.match(r"^(\d\d[a-z]?)_", path.name)
    return f"{number.group(1)} · {h1}" if number else h1


def build_nav(pages: dict) -> list:
    """The navigation: front page, the map, one section per phase (prose, then notebooks), then contributing."""
    map_text = MAP.read_text() if MAP.exists() else ""
    phases, listed, current = {}, {}, None
    for line in map_text.splitlines():
        m = re.match(r"^###\s+Phase\s+(\d+)\s*:\s*(.+?)\s*$", line)
        if m:
            current = int(m.group(1))
            phases[current] = m.group(2)
        elif current is not None and line.startswith("|"):
            for target in re.findall(r"\]\(([^)#]+)\)", line):
                if target.endswith(".md"):
                    listed[(MAP.parent / target).resolve().relative_to(ROOT).as_posix()] = current
    readme = (ROOT / "README.md").read_text()
    readme_titles = {t: n for n, t in re.findall(r"^\|\s*\d+\w*\s*\|\s*\[([^\]]+)\]\((nbs/[^)]+\.ipynb)\)", readme, re.M)}
    sections = {}
    for repo_path, staged in pages.items():
        name = Path(repo_path).name
        if repo_path.startswith("nbs/"):
            phase, kind = int(NOTEBOOK.match(name).group(1)), 1
        elif repo_path.startswith("chapters/") and (repo_path in listed or PROSE.match(name)):
            phase, kind = listed.get(repo_path, int((PROSE.match(name) or [0, "0"])[1])), 0
        else:
            continue
        sections.setdefault(phase, []).append((kind, name, {_title(repo_path, readme_titles): staged}))
    nav = [{"Home": "index.md"}]
    if "chapters/README.md" in pages:
        nav.append({"The map": pages["chapters/README.md"]})
    for phase in sorted(sections):
        title = f"Phase {phase}: {phases.get(phase, 'Chapters')}"
        nav.append({title: [entry for _, _, entry in sorted(sections[phase], key=lambda e: (e[0], e[1]))]})
    extras = [{"Contributing": pages[p]} if p == "CONTRIBUTING.md" else {"Benchmarks": pages[p]}
              for p in ("CONTRIBUTING.md", "benchmarks/README.md") if p in pages]
    return nav + extras


def stage(pages: dict = None) -> tuple:
    """Write `STAGE` from the repository's `pages` (default: those present now); (the nav, links to pages not written yet)."""
    global BRANCH_URL
    s = _settings()
    BRANCH_URL = f"{s.get('git_url', 'https://github.com/tunix-lit/tunix-from-the-inside').rstrip('/')}/blob/{s.get('branch', 'main')}"
    if STAGE.exists():
        shutil.rmtree(STAGE)
    STAGE.mkdir(parents=True)
    pages, missing = pages if pages is not None else _pages(), []
    rw = Rewriter(pages, missing)
    for folder in ("nbs/images", "chapters/images"):
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, STAGE / folder)
    shutil.copytree(ASSETS, STAGE / "site_assets")
    for repo_path, staged in pages.items():
        (STAGE / staged).parent.mkdir(parents=True, exist_ok=True)
        if repo_path.endswith(".ipynb"):
            stage_notebook(ROOT / repo_path, staged, rw)
        else:
            text = (ROOT / repo_path).read_text()
            (STAGE / staged).write_text(rw.markdown(text, repo_path, staged))
    return build_nav(pages), missing


def build(quiet: bool = True, out: Path = None) -> dict:
    """Stage and build the site into `_site/` (or `out/site`); a summary (pages, seconds, links to pages not written yet)."""
    import logging

    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    global STAGE
    start = time.perf_counter()
    overrides = {}
    if out is not None:  # a build of its own: staging, site and conversion cache all inside `out`
        out = Path(out).resolve()
        STAGE = out / "docs"
        overrides = {"docs_dir": str(STAGE), "site_dir": str(out / "site")}
    pages = _pages()  # one listing: what is staged is what the summary calls the sources
    nav, missing = stage(pages)
    sources = sorted(pages)
    if quiet:
        logging.getLogger("mkdocs").setLevel(logging.WARNING)
    config = load_config(config_file=str(ROOT / "mkdocs.yml"), nav=nav, **overrides)
    if out is not None:
        for plugin in config["plugins"].values():
            if hasattr(plugin, "config") and "cache_dir" in getattr(plugin, "config", {}):
                plugin.config["cache_dir"] = str(out / "cache")
    mkdocs_build(config)
    site = Path(config["site_dir"])
    (site / "missing_links.txt").write_text("".join(f"{m}\n" for m in missing))
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if p.name != "404.html")
    return {"site": str(site), "stage": str(STAGE), "pages": pages, "sources": sources, "missing_links": missing, "nav": nav,
            "seconds": round(time.perf_counter() - start, 1)}


def main(argv=None) -> int:
    """Command line: build, then print where the site is and how many pages it has."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show MkDocs' own log")
    parser.add_argument("--json", action="store_true", help="print the build summary as one JSON line (for tests)")
    parser.add_argument("--out", type=Path, help="stage into OUT/docs and write the site to OUT/site (default: _site/)")
    args = parser.parse_args(argv)
    summary = build(quiet=not args.verbose, out=args.out)
    if args.json:
        print(json.dumps(summary))
        return 0
    for m in summary["missing_links"]:
        print(f"not written yet, shown as text: {m}")
    print(f"{len(summary['pages'])} pages in {summary['site']}/ ({summary['seconds']} s); "
          f"open {summary['site']}/index.html or serve it: python -m http.server -d {summary['site']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
