"""No measured number in a converted notebook's markdown (issue 30, item 1).

A sentence about a measured result lives in the code cell that measured it, as a
``lessonlib.course.claims.claim`` that prints this run's numbers and whether it holds. The
markdown keeps definitions, citations and reasoning. So every digit left in a converted
notebook's markdown must be one of:

* math (``$...$``, or plain-text formulas: arithmetic on the letters such as K + 1, the
  constants 0, 1 and 2 next to an operator or bracket), a code span or code block, or inside a
  link's address;
* a reference: section, cell, notebook, exercise, part (1a), figure, table, equation, issue, a
  heading's or a list item's number, a name with a digit in it (EAGLE-3, GPT-2, H100, bf16);
* a cited published value: its sentence (or table) holds a link to the source (http/https, not a
  file of the repository), or names a source (et al., "reports", "authors", "paper",
  "datasheet", a link text of the cell) and the cell holds the link;
* a parameter the reader sets or the demonstration fixes, written ``symbol = value``
  (K = 3, c = 0.05, T = 0.25, α = 0.8, ...);
* the course's time plan (minutes, hours);
* a definition listed in ``definitions/NAME.txt`` for that notebook (a shape, a size, a count the
  demonstration sets up, a threshold or quoted figure the notebook puts to the test, such as the
  "TV < 0.01" recipe notebook 01 refutes), each phrase exactly as it appears (the list is
  reviewed like code: a measured number does not belong in it).

Anything else fails with the notebook, the cell index and the sentence. The notebooks converted
are those with a definitions file (``CONVERTED``).
"""
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = {path.stem: path for path in [ROOT / "notebooks" / "00_start_here.ipynb",
                                            *sorted((ROOT / "solutions").glob("0*.ipynb"))]}
DEFINITION_FILES = ROOT / "tests" / "course" / "definitions"  # one NAME.txt per converted notebook


def definitions(name: str) -> list[str]:
    """The phrases ``definitions/NAME.txt`` allows in NAME's markdown: what the demonstration sets
    up, not what it measures (one per line, exactly as the markdown has it; # starts a comment line)."""
    lines = (DEFINITION_FILES / f"{name}.txt").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


# a notebook is converted once it has a definitions file (every notebook, when issue 30 is done)
CONVERTED = {name: str(path.relative_to(ROOT)) for name, path in NOTEBOOKS.items()
             if (DEFINITION_FILES / f"{name}.txt").exists()}
DEFINITIONS = {name: definitions(name) for name in CONVERTED}


def test_every_notebook_is_converted():
    """Issue 30 converted all six: a new notebook (or a deleted definitions file) cannot slip out of the lint."""
    assert sorted(CONVERTED) == sorted(NOTEBOOKS), f"no definitions file for {sorted(set(NOTEBOOKS) - set(CONVERTED))}"

REFERENCE = re.compile(
    r"\b(?:sections?|cells?|notebooks?|exercises?|parts?|figures?|tables?|eq\.?|equations?|thm|theorem|cor\.?|"
    r"lemma|appendix|issues?|prs?|step|rows?|columns?|item|position|depth)\s+(?:[#]?\d+[a-d]?(?:\.\d+)?)"
    r"(?:\s*(?:,|and|or|–|-|to|with)\s*[#]?\d+[a-d]?(?:\.\d+)?)*", re.IGNORECASE)
HEADING = re.compile(r"^\s*(?:#+\s*)?\d+\.(?=\s)", re.MULTILINE)  # "## 3." and numbered list items
NOTEBOOK_NAME = re.compile(r"\b0\d_[a-z_]+(?:\.ipynb|\.po)?\b|\b0\d\b(?= —)|\b[1-5][a-d]\b|#\d+")
NAME = re.compile(r"\b[A-Za-z][A-Za-z]*-?\d[\w.]*(?:-\w+)*")  # EAGLE-3, GPT-2, T5, H100, bf16, LLaMA-3.1-8B
SYMBOL = r"(?:K|k|c|t|T|V|n|r|u|α|τ|E|top-k|top-p|seed|batch(?: size)?|FULL_RUN|prefix length)"
PARAMETER = re.compile(SYMBOL + r"\s*(?:=|≤|≥|<|>|∈)\s*\{?[−-]?\d*\.?\d+(?:,\d{3})*(?:, [\d.]+)*\}?"
                       r"(?:×|%|⁻?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)?"
                       r"|\bbatch(?: size)? \d+|\btemperature (?:T = )?\d+(?:\.\d+)?")
ARITHMETIC = re.compile(r"\b" + SYMBOL + r"\s*[+−-]\s*\d+\b(?:\s*=\s*\d+)?|\b\d+\s*[−-]\s*[αqp]\b|1\s*/\s*\(|"
                        r"1/\|vocabulary\||1/V|\bx_?[₀-₉ᵢ\d]|p_?[K\d₀-₉]|[α]\^|½|10⁻[⁰¹²³⁴⁵⁶⁷⁸⁹]+")
CONSTANT = re.compile(r"(?<=[(\[{−+/·=,^<>≤≥∈])\s?[012](?![\d.,]\d|×|%)|(?<![\d.,])[012]\s?(?=[)\]}−+/·,^])")
TIME_PLAN = re.compile(r"\b\d+(?:–\d+)?\s*(?:min|minutes|hours?)\b|\b\d:(?=\s*\d+ min)|\b\d+ to read\b")
LINK = re.compile(r"\[([^\]]*)\]\((https?://[^)]+)\)")


def strip_safe(text: str) -> str:
    """Text with code, math, link addresses, HTML comments, heading and list numbers removed."""
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.DOTALL)
    text = re.sub(r"\$[^$]*\$", " ", text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.DOTALL)
    text = HEADING.sub(" ", text)
    text = re.sub(r"\]\(https?://[^)]*\)", "]<link>", text)  # a citation's address: kept as a marker
    return re.sub(r"\]\([^)]*\)", "]", text)  # a link inside the course (../shared, a notebook) cites nothing


def units(text: str) -> list[str]:
    """Sentences of the text; a table is one unit (a citation table names its source once)."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.split("\n")
        table = [line for line in lines if line.strip().startswith("|")]
        if table:  # a table is one unit: its header, sources and rows cite or define together
            out.append("\n".join(table))
            lines = [line for line in lines if not line.strip().startswith("|")]
        flat = " ".join(line.strip() for line in lines)
        out += re.split(r"(?<=[.!?])\s+(?=[A-Z*(\[“\"])", flat)
    return out


def cited(unit: str, raw_cell: str) -> bool:
    """The unit holds a link, or names a source (et al., or a link text of this cell) linked in the cell."""
    if "]<link>" in unit or re.search(r"https?://", unit):
        return True
    if not LINK.search(raw_cell):
        return False
    names = {m.group(1).strip() for m in LINK.finditer(raw_cell) if m.group(1).strip()}
    names = {n for n in names if len(n) > 3}
    cues = ("et al", "report", "authors", "paper", "datasheet", "documentation", "according to")
    return any(cue in unit.lower() for cue in cues) or any(name in unit for name in names)


def offending(unit: str, definitions: list[str]) -> str:
    """What is left of the unit's digits once every allowed form is removed ('' when none)."""
    for phrase in sorted(definitions, key=len, reverse=True):  # longest first: "1/2,048 ≈ ..." before "2,048"
        unit = unit.replace(phrase, " ")
    for pattern in (REFERENCE, HEADING, NOTEBOOK_NAME, NAME, PARAMETER, ARITHMETIC, TIME_PLAN, CONSTANT):
        unit = pattern.sub(" ", unit)
    return unit if re.search(r"[0-9]", unit) else ""  # superscripts and subscripts are math (x², p₂)


def problems(name: str) -> list[str]:
    nb = json.loads((ROOT / CONVERTED[name]).read_text(encoding="utf-8"))
    found = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        raw = "".join(cell["source"])
        for unit in units(strip_safe(raw)):
            if cited(unit, raw) or not offending(unit, DEFINITIONS.get(name, [])):
                continue
            found.append(f"{CONVERTED[name]} cell {index}: {unit.strip()[:300]}")
    return found


@pytest.mark.parametrize("name", sorted(CONVERTED))
def test_markdown_states_no_measured_number(name):
    found = problems(name)
    assert not found, ("digits in markdown that are not a definition, citation, reference, math, code or a "
                       "parameter (state a measured result as a claim in the cell that measured it):\n"
                       + "\n".join(found))


@pytest.mark.parametrize("name", sorted(CONVERTED))
def test_every_listed_definition_still_occurs(name):
    cells = json.loads((ROOT / CONVERTED[name]).read_text(encoding="utf-8"))["cells"]
    text = " ".join(" ".join("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")
    stale = [phrase for phrase in DEFINITIONS.get(name, []) if phrase not in text]
    assert not stale, f"{name}: DEFINITIONS lists phrases its markdown no longer has: {stale}"


def test_the_lint_catches_a_measured_number():
    """Negative control: a measured speedup, an α and a count in prose are caught; the allowed forms pass."""
    measured = ["The tree reaches 1.73× against the chain's 1.45×.", "draft-kl gets α of 0.577 on code.",
                "It agreed on 30 of 30 prompts."]
    for sentence in measured:
        assert offending(sentence, []) and not cited(sentence, sentence), sentence
    allowed = ["Section 5 sets K = 3 and c = 0.05 (exercise 2, part 2a).", "About 10 min; see `K=4` and $x_1$.",
               "At α = 0.8 the formula gives E with K + 1 rows."]
    for sentence in allowed:
        assert not offending(strip_safe(sentence), []), sentence
    # the sentences the conversion removed are caught even with each notebook's definitions
    old = {"00_start_here": "Temperature cuts both ways: from T = 0.25 to 16, α rose from 0.334 to 0.963.",
           "01_exact_rule": "0 of 1,000 runs straight from p pass it, because the noise floor is 0.0202.",
           "03_distill_draft": "the distilled `draft-kl` reaches α = 0.577 on code and 0.582 on prose"}
    for name, sentence in old.items():
        assert offending(strip_safe(sentence), DEFINITIONS[name]), sentence
    assert cited("Leviathan et al. report 3.69×", "[Leviathan et al. 2023](https://arxiv.org/abs/2211.17192)")
    assert cited(strip_safe("[Medusa](https://arxiv.org/abs/2401.10774) reports 2.83×"), "")
    assert not cited(strip_safe("[the notes](../shared/reference-numbers.md) give 2.83×"),
                     "[the notes](../shared/reference-numbers.md)")
