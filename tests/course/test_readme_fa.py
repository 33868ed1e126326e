"""README.fa.md is README.md in Persian, section by section.

Every heading of README.fa.md is preceded by a marker line: ``<!-- en: ## Quick start -->`` names
the English heading it translates, ``<!-- fa-only -->`` a section only the Persian has (where
the Persian edition is, for translators). The headings of README.md must all be there, in the same
order and at the same level, and each Persian section must carry its English section's numbers,
commands (fenced code), code spans and links (``drift.carried``), up to the few links that point
to the Persian edition instead (``SAME``).

Most of what README.md said moved into the pages of ``docs/``, which have no Persian edition yet;
README.fa.md keeps its translation of those sections. A marker may name a heading of a page of
``docs/`` (its text: a page's sections sit a level higher than they did in the README); it must
exist there, but the section is not compared (the English pages are authored without waiting for
their Persian). Negative controls: a dropped section, a changed number, a missing link or command
and a marker naming a heading that exists nowhere each fail.
"""
import re
from pathlib import Path

import pytest

from lessonlib.course import drift

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- (?:en: (?P<en>#{1,6} .+?)|(?P<fa>fa-only)) -->$")
HEADING = re.compile(r"^(#{1,6}) \S")
FENCE = re.compile(r"^(`{3,}|~{3,})")
# What the Persian README links to instead of the English one's target (the Persian edition,
# the Persian lesson's screenshot, which tests/test_browser.py saves as <stem>-fa.png)
ENGLISH_SHOT = ("![Notebook 02 in JupyterLab: sliders for α, K and c drive the speedup curve]"
                "(outputs/screenshots/02_speedup.png)")
SAME = {"README.fa.md": "README.md", "notebooks/00_start_here.ipynb": "notebooks/fa/00_start_here.ipynb",
        ENGLISH_SHOT: "](outputs/screenshots/00_start_here-fa.png)"}
SCREENSHOT = "outputs/screenshots/00_start_here-fa.png"


def _lines_outside_fences(text: str):
    """(line, inside a fenced block) for every line of a Markdown text."""
    fence = None
    for line in text.split("\n"):
        opens = FENCE.match(line)
        if fence is None and opens:
            fence = opens[1]
            yield line, True
        elif fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence = None
            yield line, True
        else:
            yield line, False


def english_sections(text: str) -> list[tuple[str, str]]:
    """(heading line, the section's text up to the next heading) of README.md."""
    sections: list[tuple[str, list[str]]] = []
    for line, fenced in _lines_outside_fences(text):
        if not fenced and HEADING.match(line):
            sections.append((line.strip(), []))
        elif sections:
            sections[-1][1].append(line)
    return [(h, "\n".join(body)) for h, body in sections]


def persian_sections(text: str) -> list[tuple[str | None, str, str]]:
    """(English heading it translates or None for fa-only, Persian heading, section text) of
    README.fa.md; a heading without a marker line before it raises ValueError."""
    sections: list[tuple[str | None, str, list[str]]] = []
    marker, pending = None, False
    for line, fenced in _lines_outside_fences(text):
        found = None if fenced else MARKER.match(line.strip())
        if found:
            marker, pending = found["en"], True
        elif not fenced and HEADING.match(line):
            if not pending:
                raise ValueError(f"README.fa.md: heading {line!r} has no <!-- en: ... --> or <!-- fa-only --> line")
            sections.append((marker, line.strip(), []))
            pending = False
        elif sections:
            sections[-1][2].append(line)
    return [(en, h, "\n".join(body)) for en, h, body in sections]


def _text(heading: str) -> str:
    """A heading line without its level: ``"## Hardware"`` -> ``"Hardware"``."""
    return heading.lstrip("#").strip()


def docs_headings(root: Path = ROOT) -> set[str]:
    """The text of every heading of the pages in docs/ (levels left out)."""
    return {_text(h) for page in sorted((root / "docs").glob("*.md"))
            for h, _ in english_sections(page.read_text(encoding="utf-8"))}


def problems(english: str, persian: str, moved: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """What README.fa.md lacks of README.md, one line each (empty: complete). ``moved``: the
    headings of docs/ (``docs_headings``), which a Persian section may translate instead."""
    en = english_sections(english)
    headings = {h for h, _ in en}
    translated = [s for s in persian_sections(persian) if s[0] is not None]
    fa = [s for s in translated if s[0] in headings]
    found = [f"{en_heading!r}: translated by {fa_heading!r}, but neither README.md nor docs/ has that heading"
             for en_heading, fa_heading, _ in translated
             if en_heading not in headings and _text(en_heading) not in moved]
    if [h for h, _ in en] != [m for m, _, _ in fa]:
        found.append(f"sections differ: English {[h for h, _ in en]}, Persian translates {[m for m, _, _ in fa]}")
    for (heading, body), (_, fa_heading, fa_body) in zip(en, fa):
        if fa_heading.split(" ")[0] != heading.split(" ")[0]:
            found.append(f"{heading!r}: Persian heading {fa_heading!r} at another level")
        for target, instead in SAME.items():
            body = body.replace(target, instead)
        lacking = drift.carried(heading + "\n" + body, fa_heading + "\n" + fa_body)
        if lacking:
            found.append(f"{heading!r}: the Persian lacks {', '.join(lacking)}")
    return found


def _read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_readme_fa_has_every_section_of_readme_with_its_numbers_commands_and_links():
    found = problems(_read("README.md"), _read("README.fa.md"), docs_headings())
    assert not found, "README.fa.md against README.md:\n" + "\n".join(found)


def test_readme_fa_shows_the_screenshot_the_browser_test_takes_of_the_persian_lesson():
    assert f"]({SCREENSHOT})" in _read("README.fa.md")
    browser = _read("tests/test_browser.py")
    assert 'Path(path).stem + "-fa"' in browser and '"notebooks/fa/00_start_here.ipynb"' in browser


def test_negative_control_a_dropped_section_fails():
    persian = _read("README.fa.md")
    marker = "<!-- en: ## Read on -->"
    assert marker in persian
    cut = persian.split(marker)[0]  # README.md's last section, gone (and all after it)
    assert any("sections differ" in p for p in problems(_read("README.md"), cut, docs_headings()))


def test_negative_control_a_changed_number_fails():
    english = _read("README.md")
    assert english.count("3.11") == 1
    found = problems(english.replace("3.11", "3.12"), _read("README.fa.md"), docs_headings())
    assert found == ["'## Quick start': the Persian lacks number 3.12"], found


def test_negative_control_a_missing_link_or_command_fails():
    persian = _read("README.fa.md")
    link, code = "[تست‌ها](docs/testing.md)", "| `gpu_check.sh` ("
    assert link in persian and code in persian
    found = problems(_read("README.md"), persian.replace(link, "تست‌ها"), docs_headings())
    assert found == ["'## Read on': the Persian lacks link docs/testing.md"], found
    found = problems(_read("README.md"), persian.replace(code, "| اسکریپت gpu_check ("), docs_headings())
    assert found == ["'## Layout': the Persian lacks code `gpu_check.sh`"], found


def test_negative_control_a_marker_naming_no_heading_fails():
    """A Persian section that translates a heading found neither in README.md nor in docs/ (here,
    and with no docs/ at all for the sections that moved there) is reported."""
    persian = _read("README.fa.md")
    marker = "<!-- en: ## Hardware -->"
    assert marker in persian and "Hardware" in docs_headings()
    found = problems(_read("README.md"), persian.replace(marker, "<!-- en: ## Hardwear -->"), docs_headings())
    assert len(found) == 1 and found[0].startswith("'## Hardwear': translated by '## "), found
    assert found[0].endswith("but neither README.md nor docs/ has that heading"), found
    without_docs = problems(_read("README.md"), persian)
    assert any(p.startswith("'## Hardware': translated by") for p in without_docs), without_docs


def test_an_unmarked_heading_is_refused():
    with pytest.raises(ValueError, match="has no <!-- en"):
        persian_sections("<!-- fa-only -->\n## یک\n\nمتن\n\n## دو\n")
