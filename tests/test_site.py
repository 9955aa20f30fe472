"""The book site builds offline and every page works in a real browser (headless Debian chromium).

Builds the site with `tools/build_site.py` (what the README's command runs; inside a network
namespace with no interfaces where `unshare` works, so a build that reached for the network
fails), serves `_site/` on 127.0.0.1, and opens every page: no console errors, every image loaded,
every internal link resolves, every resource comes from the local server, every notebook page shows its stored outputs,
math is rendered by KaTeX (no raw `$$` left, no KaTeX parse errors). Without chromium the browser
test is skipped with the reason, except under CI=true, where it fails.
"""

import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
_spec = importlib.util.spec_from_file_location("build_site", ROOT / "tools" / "build_site.py")
build_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_site)


def _no_browser_reason():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        return f"{' and '.join(missing)} not installed (apt-get install -y chromium chromium-driver)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


def _offline_prefix() -> list:
    """`unshare -rn` (a new network namespace with no interfaces) where this host allows it, else nothing."""
    unshare = shutil.which("unshare")
    for flags in (["-rn"], ["-n"]):
        if unshare and subprocess.run([unshare, *flags, "true"], capture_output=True).returncode == 0:
            return [unshare, *flags]
    return []


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The built site (build_site's summary), built with the network cut off where the host allows it.

    It is built into a folder of its own (`--out`), not the repository's shared `_site/` and `_site_build/`:
    a second build (a developer's `python tools/build_site.py`, another test run in the same checkout) cleans
    and rewrites those folders, and a build that lists its pages while another one is rewriting them finds some
    missing (the parallel run's "nbs/33_ppo.ipynb has no page")."""
    prefix = _offline_prefix()
    out_dir = tmp_path_factory.mktemp("site")
    out = subprocess.run([*prefix, sys.executable, str(ROOT / "tools" / "build_site.py"), "--json", "--out", str(out_dir)],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    summary["offline"] = bool(prefix)
    assert Path(summary["site"]).resolve() == (out_dir / "site").resolve(), summary["site"]
    print(f"site built in {summary['seconds']} s, {'without network' if prefix else 'network not cut (no unshare here)'}")
    return summary


@pytest.fixture(scope="module")
def server(site):
    """Base URL of a local HTTP server over `_site/`."""
    handler = functools.partial(_QuietHandler, directory=site["site"])
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser():
    """A headless chromium driven by Debian's chromedriver (selenium never downloads a driver)."""
    reason = _no_browser_reason()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the browser test, but {reason}")
        pytest.skip(reason)
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager: never reach the network
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="tunix_lit_site_chromium_")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--window-size=1280,900"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def test_site_builds_with_every_chapter_and_phase(site):
    pages = set(site["pages"])
    assert "index.html" in pages and "chapters/index.html" in pages
    # the home page is the README, the book's front page
    readme_sections = [l[3:].strip() for l in (ROOT / "README.md").read_text().splitlines() if l.startswith("## ")]
    home = (Path(site["site"]) / "index.html").read_text()
    assert readme_sections and all(s.split("`")[0] in home for s in readme_sections[:3]), readme_sections[:3]
    sources = site["sources"]  # the chapters present when the site was built (others may be arriving)
    assert sum(s.startswith("nbs/") for s in sources) > 15 and sum(s.startswith("chapters/") for s in sources) > 5
    for src in sources:
        if src.startswith(("nbs/", "chapters/")) and src != "chapters/README.md":
            assert f"{Path(src).with_suffix('.html')}" in pages, f"{src} has no page"
    titles = [next(iter(entry)) for entry in site["nav"]]
    phases = [t for t in titles if t.startswith("Phase ")]
    assert phases == sorted(phases, key=lambda t: int(t.split()[1].rstrip(":"))), phases
    # every notebook sits in the phase of its first digit
    for entry in site["nav"]:
        (title, items), = entry.items()
        if title.startswith("Phase "):
            for item in items:
                (_, path), = item.items()
                if path.startswith("nbs/"):
                    assert Path(path).name[0] == title.split()[1].rstrip(":"), (title, path)
    # links to chapters not written yet are only to chapters the map names
    map_text = (ROOT / "chapters" / "README.md").read_text()
    for entry in site["missing_links"]:
        stem = Path(entry.split(": ", 1)[1].split("#")[0]).stem
        assert stem in map_text or stem in (ROOT / "README.md").read_text(), f"broken link (not a planned chapter): {entry}"


def test_nav_follows_a_rule_not_a_list(tmp_path, monkeypatch):
    # a notebook that appears later lands in its phase, after the prose and in number order
    pages = {"README.md": "index.md", "chapters/README.md": "chapters/README.md",
             "chapters/21_rl_cluster.md": "chapters/21_rl_cluster.md",
             "nbs/21_rl_cluster.ipynb": "nbs/21_rl_cluster.ipynb", "nbs/20_rl_common.ipynb": "nbs/20_rl_common.ipynb",
             "nbs/42_external_engines.ipynb": "nbs/42_external_engines.ipynb"}
    monkeypatch.setattr(build_site, "_title", lambda repo_path, titles: Path(repo_path).stem)
    nav = build_site.build_nav(pages)
    sections = {next(iter(e)): next(iter(e.values())) for e in nav}
    phase2 = next(v for k, v in sections.items() if k.startswith("Phase 2"))
    assert [next(iter(i.values())) for i in phase2] == ["chapters/21_rl_cluster.md", "nbs/20_rl_common.ipynb",
                                                         "nbs/21_rl_cluster.ipynb"]
    phase4 = next(v for k, v in sections.items() if k.startswith("Phase 4"))
    assert [next(iter(i.values())) for i in phase4] == ["nbs/42_external_engines.ipynb"]


def _expected_outputs(staged_nb: Path) -> int:
    """Code cells of a staged notebook that the page should show with outputs."""
    cells = json.loads(staged_nb.read_text())["cells"]
    return sum(1 for c in cells if c["cell_type"] == "code" and c.get("outputs")
               and not {"remove_cell", "remove_output"} & set(c.get("metadata", {}).get("tags", [])))


PAGE_PROBE = """
const text = (el) => {
  const copy = el.cloneNode(true);
  copy.querySelectorAll('pre, code, script, style, .katex, .highlight, .highlight-ipynb').forEach(n => n.remove());
  return copy.textContent;
};
const main = document.querySelector('article') || document.body;
return {
  images: Array.from(document.images).map(i => [i.currentSrc || i.src, i.complete, i.naturalWidth]),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
  resources: performance.getEntriesByType('resource').map(r => r.name),
  code_cells_with_output: Array.from(document.querySelectorAll('.jp-CodeCell'))
      .filter(c => !c.parentElement.closest('.jp-CodeCell'))  // the template nests a wrapper of the same class
      .filter(c => c.querySelector('.jp-OutputArea-output')).length,
  katex: document.querySelectorAll('.katex').length,
  katex_errors: Array.from(document.querySelectorAll('.katex-error')).map(e => e.textContent.slice(0, 80)),
  arithmatex_unrendered: Array.from(document.querySelectorAll('.arithmatex')).filter(a => !a.querySelector('.katex')).length,
  raw_display_math: (text(main).match(/\\$\\$/g) || []).length,
};
"""


def _notebook_has_math(staged_nb: Path) -> bool:
    cells = json.loads(staged_nb.read_text())["cells"]
    md = "\n".join(c["source"] if isinstance(c["source"], str) else "".join(c["source"])
                   for c in cells if c["cell_type"] == "markdown")
    md = re.sub(r"`[^`]*`", "", md)
    return bool(re.search(r"\$\$.+?\$\$|\$[^$\s][^$\n]*\$", md, re.S))


def test_every_page_in_a_browser(site, server, browser):
    checked, problems, link_status = 0, [], {}
    stage = Path(site["stage"])
    for page in site["pages"]:
        url = urllib.parse.urljoin(server, page)
        browser.get_log("browser")  # drop what earlier pages left
        browser.get(url)
        browser.execute_script("return document.readyState")
        got = browser.execute_script(PAGE_PROBE)
        for entry in browser.get_log("browser"):
            if entry["level"] == "SEVERE":
                problems.append(f"{page}: console error: {entry['message'][:300]}")
        for src, complete, width in got["images"]:
            if not complete or width == 0:
                problems.append(f"{page}: image did not load: {src}")
        for res in got["resources"]:
            if not res.startswith(server) and not res.startswith("data:"):
                problems.append(f"{page}: fetched from outside the site: {res}")
        for link in got["links"]:
            target = link.split("#")[0]
            if not target.startswith(server):
                continue  # external (GitHub, upstream): not part of the offline site
            if target not in link_status:
                try:
                    with urllib.request.urlopen(target, timeout=10) as r:
                        link_status[target] = r.status
                except urllib.error.HTTPError as e:
                    link_status[target] = e.code
            if link_status[target] != 200:
                problems.append(f"{page}: broken internal link {link} ({link_status[target]})")
        if got["katex_errors"]:
            problems.append(f"{page}: math KaTeX could not parse: {got['katex_errors'][:3]}")
        if got["arithmatex_unrendered"] or got["raw_display_math"]:
            problems.append(f"{page}: math left unrendered ({got['arithmatex_unrendered']} spans, "
                            f"{got['raw_display_math']} raw $$)")
        if page.startswith("nbs/"):
            staged = stage / "nbs" / (Path(page).stem + ".ipynb")
            want = _expected_outputs(staged)
            if got["code_cells_with_output"] != want or want == 0:
                problems.append(f"{page}: shows {got['code_cells_with_output']} cells with outputs, the notebook "
                                f"stores {want} (python tools/run_notebook.py nbs/{Path(page).stem}.ipynb)")
            if _notebook_has_math(staged) and got["katex"] == 0:
                problems.append(f"{page}: has math but none was rendered")
        checked += 1
    print(f"opened {checked} pages, checked {len(link_status)} internal link targets")
    assert checked == len(site["pages"]) and checked > 20
    assert not problems, "\n".join(problems)


def test_notebook_pages_hide_what_nbdev_hides(tmp_path, monkeypatch):
    cells = [("code", "#| default_exp models.transformer"), ("markdown", "# T\n\nSee [the next](20_rl_common.ipynb)."),
             ("code", "#| hide\nimport os"), ("code", "#| export\ndef f():\n    return 1"),
             ("code", "#| eval: false\nnbdev_export()"), ("code", "#| echo: false\nf()"),
             ("code", 'import sys\nif "google.colab" in sys.modules:\n    subprocess.run(["pip", "install", "x"])'),
             ("markdown", "![d](https://raw.githubusercontent.com/o/r/main/nbs/images/10_model.svg)")]
    nb = {"cells": [{"cell_type": k, "source": s, "metadata": {}, **({"outputs": []} if k == "code" else {})}
                    for k, s in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    src = tmp_path / "10_demo.ipynb"
    src.write_text(json.dumps(nb))
    monkeypatch.setattr(build_site, "STAGE", tmp_path / "stage")
    (tmp_path / "stage" / "nbs").mkdir(parents=True)
    pages = {"nbs/10_demo.ipynb": "nbs/10_demo.ipynb", "nbs/20_rl_common.ipynb": "nbs/20_rl_common.ipynb"}
    build_site.stage_notebook(src, "nbs/10_demo.ipynb", build_site.Rewriter(pages, []))
    staged = json.loads((tmp_path / "stage" / "nbs" / "10_demo.ipynb").read_text())["cells"]
    tags = [set(c["metadata"].get("tags", [])) for c in staged]
    assert [("remove_cell" in t) for t in tags] == [True, False, True, False, True, False, True, False]
    assert "remove_input" in tags[5]
    assert staged[3]["source"] == "def f():\n    return 1"  # directive lines are not shown
    assert "(20_rl_common.html)" in staged[1]["source"]  # notebook links point at the built page
    assert staged[7]["source"] == "![d](images/10_model.svg)"  # a raw URL of one of our figures: the local copy


def test_staging_writes_exactly_the_pages_it_was_given(tmp_path, monkeypatch):
    # the build lists the repository's pages once and stages that listing; the summary reports the same listing,
    # so a chapter that appears (or is rewritten) while the site builds cannot be counted without being staged
    monkeypatch.setattr(build_site, "STAGE", tmp_path / "docs")
    pages = {k: v for k, v in build_site._pages().items()
             if k in ("README.md", "chapters/README.md", "chapters/21_rl_cluster.md", "nbs/20_rl_common.ipynb")}
    assert len(pages) == 4
    nav, _ = build_site.stage(pages)
    staged = sorted(p.relative_to(tmp_path / "docs").as_posix() for p in (tmp_path / "docs").rglob("*")
                    if p.suffix in (".md", ".ipynb") and not {"images", "site_assets"} & set(p.parts))
    assert staged == sorted(pages.values())
    listed = [next(iter(i.values())) for e in nav for v in e.values() for i in (v if isinstance(v, list) else [{0: v}])]
    assert set(listed) == set(pages.values())
