"""README.fa.md is README.md in Persian, section by section.

Every heading of README.fa.md is preceded by a marker line: ``<!-- en: ## Quick start -->`` names
the English heading it translates, ``<!-- fa-only -->`` a section only the Persian has (where
the Persian edition is, for translators). The English headings must all be there, in the same
order and at the same level, and each Persian section must carry its English section's numbers,
commands (fenced code), code spans and links (``drift.carried``), up to the few links that point
to the Persian edition instead (``SAME``). Negative controls: a dropped section, a changed number
and a missing link each fail.
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


def problems(english: str, persian: str) -> list[str]:
    """What README.fa.md lacks of README.md, one line each (empty: complete)."""
    en = english_sections(english)
    fa = [s for s in persian_sections(persian) if s[0] is not None]
    found = []
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
    found = problems(_read("README.md"), _read("README.fa.md"))
    assert not found, "README.fa.md against README.md:\n" + "\n".join(found)


def test_readme_fa_shows_the_screenshot_the_browser_test_takes_of_the_persian_lesson():
    assert f"]({SCREENSHOT})" in _read("README.fa.md")
    browser = _read("tests/test_browser.py")
    assert 'Path(path).stem + "-fa"' in browser and '"notebooks/fa/00_start_here.ipynb"' in browser


def test_negative_control_a_dropped_section_fails():
    persian = _read("README.fa.md")
    marker = "<!-- en: ## Hardware -->"
    assert marker in persian
    cut = persian.split(marker)[0]  # the last section, gone
    assert any("sections differ" in p for p in problems(_read("README.md"), cut))


def test_negative_control_a_changed_number_fails():
    english = _read("README.md")
    assert "24 × 384" in english
    found = problems(english.replace("24 × 384", "24 × 512"), _read("README.fa.md"))
    assert found == ["'## Hardware': the Persian lacks number 512"], found


def test_negative_control_a_missing_link_or_command_fails():
    persian = _read("README.fa.md")
    assert "scripts/gpu_check.sh" in persian
    found = problems(_read("README.md"), persian.replace("`scripts/gpu_check.sh`", "اسکریپت GPU"))
    assert any("code `scripts/gpu_check.sh`" in p for p in found), found


def test_an_unmarked_heading_is_refused():
    with pytest.raises(ValueError, match="has no <!-- en"):
        persian_sections("<!-- fa-only -->\n## یک\n\nمتن\n\n## دو\n")
