"""The README and docs/: every relative link leads somewhere, the README stays short, and the
figures docs/ holds are the ones its generator renders from committed files.

A link is a Markdown link or image, ``[text](target)``, outside code; a relative target must be
a file of the repository (resolved from the page's folder), and a ``#fragment`` must be the slug
of a heading of the page it points to (GitHub's rule: lower case, punctuation dropped, spaces
to hyphens). External links (``https:``, ``mailto:``) are not fetched: nothing downloads in a test.
"""
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "README.fa.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
DOCS = ["architecture.md", "models-and-engines.md", "measuring.md", "testing.md", "translating.md", "instructors.md"]
MAX_LINES, MAX_WIDTH = 120, 300

FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
CODE = re.compile(r"(`+)(?:[^`]|(?!\1)`)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _outside_code(text: str) -> str:
    """``text`` without fenced blocks and code spans (a link in code is not a link)."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, everything but letters, digits, spaces, hyphens
    and underscores dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown page's headings (a repeated heading's gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", text)):  # a heading's code span is part of its anchor
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def dead_links(page: str, text: str, root: Path = ROOT) -> list[str]:
    """'page: target (why)' for every relative link of ``text`` (the page ``page``, relative to
    ``root``) that leads to no file, or to a heading its page does not have."""
    dead = []
    for target in LINK.findall(_outside_code(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...
            continue
        path, _, fragment = target.partition("#")
        file = (root / page).parent / path
        if path and not file.is_file():
            dead.append(f"{page}: {target} (no such file)")
        elif fragment and (not path or file.suffix == ".md"):
            here = file.read_text(encoding="utf-8") if path else text  # no path: this page
            if fragment not in anchors(here):
                dead.append(f"{page}: {target} (no heading with that anchor)")
    return dead


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_leads_to_a_file_and_heading(page):
    dead = dead_links(page, (ROOT / page).read_text(encoding="utf-8"))
    assert not dead, "\n".join(dead)


def test_the_readme_links_every_docs_page_and_docs_has_them_all():
    readme = _outside_code((ROOT / "README.md").read_text(encoding="utf-8"))
    targets = set(LINK.findall(readme))
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md")) == sorted(DOCS)
    missing = [name for name in DOCS if f"docs/{name}" not in targets]
    assert not missing, f"README.md does not link {missing}"


def test_the_readme_is_short_and_has_no_overlong_line():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    long = [f"line {i}: {len(line)} characters" for i, line in enumerate(lines, 1) if len(line) > MAX_WIDTH]
    assert not long, "README.md: " + ", ".join(long)


def test_negative_controls_dead_file_dead_anchor_and_what_is_not_a_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## The `x`, part two\n")
    text = ("[ok](docs/a.md) [ok](docs/a.md#the-x-part-two) ![ok](docs/a.md) [ok](#top-heading)\n"
            "[web](https://example.org/none) `[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"
            "# Top heading\n")
    assert dead_links("README.md", text, tmp_path) == []
    broken = text + "[gone](docs/b.md) [bad](docs/a.md#part-two) [self](#nowhere) ![img](docs/x.png)\n"
    assert dead_links("README.md", broken, tmp_path) == [
        "README.md: docs/b.md (no such file)", "README.md: docs/a.md#part-two (no heading with that anchor)",
        "README.md: #nowhere (no heading with that anchor)", "README.md: docs/x.png (no such file)"]
    # a page in docs/ resolves from its own folder
    assert dead_links("docs/a.md", "[up](../README.md)", tmp_path) == ["docs/a.md: ../README.md (no such file)"]
    (tmp_path / "README.md").write_text(text)
    assert dead_links("docs/a.md", "[up](../README.md#top-heading)", tmp_path) == []


def test_slug_follows_githubs_rule():
    assert slug("`lessonlib`, layer by layer") == "lessonlib-layer-by-layer"
    assert slug("The table of record and regenerating everything") == "the-table-of-record-and-regenerating-everything"
    assert anchors("# A\n\n## A\n") == {"a", "a-1"}


# ----------------------------------------------------------------------------- generated figures

def _generator():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "scripts" / "docs_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_mutant_figures_are_what_the_generator_renders():
    gen = _generator()
    text = (ROOT / gen.PAGE).read_text(encoding="utf-8")
    assert gen.rendered(text) == text, (
        f"{gen.PAGE}: a generated mutants block is stale: run python scripts/docs_figures.py")


def test_the_score_per_file_counts_kills_leaves_out_equivalents_and_errors_and_names_what_did_not_run():
    gen = _generator()
    mutants = [("core", "a.py", "x", "y", "one"), ("core", "a.py", "x", "y", "two"), ("core", "a.py", "x", "y", "same"),
               ("decoding", "b.py", "x", "y", "three"), ("decoding", "b.py", "x", "y", "four"),
               ("decoding", "c.py", "x", "y", "new since the run")]
    results = [{"path": "a.py", "why": "one", "status": "killed", "equivalent": False},
               {"path": "a.py", "why": "two", "status": "survived", "equivalent": False},
               {"path": "a.py", "why": "same", "status": "survived", "equivalent": True},
               {"path": "b.py", "why": "three", "status": "killed", "equivalent": False},
               {"path": "b.py", "why": "four", "status": "error", "equivalent": False},
               {"path": "b.py", "why": "a mutant the catalogue no longer holds", "status": "killed",
                "equivalent": False}]
    assert gen.module_scores(mutants, results) == [("a.py", 1, 2, 1, 0, 0), ("b.py", 1, 1, 0, 1, 0),
                                                   ("c.py", 0, 0, 0, 0, 1)]
    table = gen.score_block(mutants, {"git_revision": "abc", "written": "then", "machine": "here",
                                      "mutants": results})
    assert "| `a.py` | 1 / 2 | 50 % | 1 | 0 | 0 |" in table and "| `c.py` | 0 / 0 | – | 0 | 0 | 1 |" in table
    assert "| all | 2 / 3 | 66.7 % | 1 | 1 | 1 |" in table and "Run at abc (then, here)" in table
    assert "Survived: `a.py`: two." in table  # the equivalent one is not listed
    assert "No mutation run is stored" in gen.score_block(mutants, None)


def test_a_stored_run_that_is_not_one_is_refused_by_name(tmp_path):
    gen = _generator()
    (tmp_path / "scripts" / "mutants").mkdir(parents=True)
    (tmp_path / gen.RESULTS).write_text('{"mutants": [{"path": "a.py"}]}')
    with pytest.raises(ValueError, match="is not a stored mutation run"):
        gen.load_results(tmp_path)
    assert gen.load_results(tmp_path / "nowhere") is None


def test_the_mutant_figures_count_each_group_and_leave_equivalents_out():
    gen = _generator()
    mutants = [("core", "f", "a", "b", "one"), ("decoding", "f", "a", "b", "two"),
               ("core", "f", "a", "b", "three")]
    assert gen.counts(mutants, {"three": "same"}) == [("core", 2, 1), ("decoding", 1, 0)]
    table = gen.block(mutants, {"three": "same"})
    assert "| core | 2 | 1 | 1 |" in table and "| decoding | 1 | 0 | 1 |" in table and "| all | 3 | 1 | 2 |" in table
    with pytest.raises(ValueError, match="EQUIVALENT names mutants"):
        gen.counts(mutants, {"four": "no such mutant"})


def test_negative_controls_a_typed_figure_or_a_new_mutant_fails_the_check():
    gen = _generator()
    mutants, equivalent = gen.load_catalogue()
    text = (ROOT / gen.PAGE).read_text(encoding="utf-8")
    current = gen.block(mutants, equivalent)
    assert current in text
    # a hand edit of one figure in the page
    row = current.splitlines()[3]  # the first group's row
    edited = text.replace(row, row.replace(" |", "0 |", 1), 1)
    assert edited != text and gen.render(edited, current) != edited
    # the catalogue grows: the committed block no longer matches
    grown = gen.block([*mutants, (mutants[0][0], "f", "a", "b", "a new mutant")], equivalent)
    assert gen.render(text, grown) != text
    # a page without its markers cannot be rendered
    with pytest.raises(ValueError, match="must hold one generated block"):
        gen.render(text.replace(gen.BEGIN, ""), current)
