"""One run makes every artifact (issue 30, item 2): the regeneration plan, run ids in notebooks,
the instructor notes' generated expected results, and the committed files checked against each other."""
from __future__ import annotations

import json

import nbformat
import pytest

from lessonlib import cli, paths, runs
from lessonlib.bench import record
from lessonlib.course import notes, regenerate
from lessonlib.course.claims import claim

ROOT = paths.ROOT


def test_the_plan_runs_benchmarks_before_the_notebooks_that_read_them_and_notes_last():
    names = list(regenerate.NAMES)
    benchmarks = [n for n in regenerate.GROUPS["benchmarks"] if n != "bench record"]
    assert names.index("bench record") > max(names.index(n) for n in benchmarks)
    assert names.index("bench record") < min(names.index(n) for n in regenerate.GROUPS["notebooks"])
    assert names.index("notebook 05_high_temperature") < names.index("skill") < names.index("exercises")
    assert names.index("exercises") < names.index("persian") < names.index("notes") == len(names) - 1
    # the screenshots show the Persian edition too, so they come after it is built
    assert names.index("persian") < names.index("screenshots")
    assert {s.makes[0] for s in regenerate.PLAN if s.name.startswith("notebook ")} == set(notes.NOTEBOOKS.values())


def test_select_takes_steps_groups_or_a_start_and_refuses_unknown_names():
    assert [s.name for s in regenerate.select(["skill", "notes"])] == ["skill", "notes"]
    assert len(regenerate.select(["notebooks"])) == 6
    assert [s.name for s in regenerate.select(start="persian")] == ["persian", "screenshots", "notes"]
    with pytest.raises(ValueError, match="unknown step"):
        regenerate.select(["bench nope"])


@pytest.mark.parametrize("argv, named", [(["--only", "nope"], "--only"), (["--only", "skill", "--from", "skill"],
                                                                          "--from"), (["--run", "a b"], "--run")])
def test_bad_flags_are_one_line(argv, named, capsys):
    try:
        code = cli.run(regenerate.main, argv, prog="regenerate")
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and named in err[0]


def test_dry_run_prints_the_plan_and_runs_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path))
    assert regenerate.main(["--dry-run", "--only", "notebooks"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and all(line.startswith("would run: -m jupyter nbconvert") for line in out)
    assert not (tmp_path / regenerate.MANIFEST).exists()


def test_a_step_runs_with_its_own_environment_and_screenshots_land_in_the_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path))
    probe = regenerate.Step("probe", ("-c", f"import os; open({str(tmp_path / 'env.txt')!r}, 'w').write("
                                      "os.environ['LESSONLIB_SCREENSHOTS'])"), (),
                            env=(("LESSONLIB_SCREENSHOTS", "x/y"),))
    regenerate.run([probe], "test-env")
    assert (tmp_path / "env.txt").read_text() == str(ROOT / "x" / "y")  # relative to the repository
    shots = next(s for s in regenerate.PLAN if s.name == "screenshots")
    assert dict(shots.env) == {"LESSONLIB_SCREENSHOTS": "outputs/screenshots"} and "browser" in shots.argv


def test_a_step_runs_under_the_run_id_and_the_manifest_records_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path))
    step = regenerate.Step("probe", ("-c", f"import os; open({str(tmp_path / 'id.txt')!r}, 'w').write(os.environ['"
                                     f"{runs.ENV}'])"), ())
    fail = regenerate.Step("fail", ("-c", "raise SystemExit(3)"), ())
    never = regenerate.Step("never", ("-c", "raise SystemExit(0)"), ())
    manifest = regenerate.run([step, fail, never], "regen-test-1")
    assert (tmp_path / "id.txt").read_text() == "regen-test-1"
    assert [s["step"] for s in manifest["steps"]] == ["probe", "fail"] and manifest["steps"][1]["exit_code"] == 3
    regenerate.write_manifest(manifest)
    regenerate.write_manifest({"id": "regen-test-1", "steps": [{"step": "later", "exit_code": 0}]})  # continued
    saved = json.loads((tmp_path / regenerate.MANIFEST).read_text())
    assert saved["id"] == "regen-test-1" and [s["step"] for s in saved["steps"]] == ["probe", "fail", "later"]
    regenerate.write_manifest({"id": "regen-test-2", "steps": []})  # a new run starts a new manifest
    assert json.loads((tmp_path / regenerate.MANIFEST).read_text())["steps"] == []


def test_stamping_a_notebook_changes_only_its_metadata(tmp_path):
    source = ROOT / "solutions" / "01_exact_rule.ipynb"
    (tmp_path / "nb.ipynb").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    regenerate.stamp_notebook("nb.ipynb", "regen-x", tmp_path)
    before, after = (nbformat.read(p, as_version=4) for p in (source, tmp_path / "nb.ipynb"))
    assert after.metadata["lessonlib"]["run"] == "regen-x" and notes.run_of(tmp_path / "nb.ipynb") == "regen-x"
    after.metadata.pop("lessonlib")
    before.metadata.pop("lessonlib", None)  # a notebook a regeneration executed carries its own stamp
    assert after == before


def _notebook(tmp_path, lines, run=None):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print()")
    text = "table\n" + "".join(f"{line}\n" for line in lines)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nb.cells = [nbformat.v4.new_markdown_cell("The run below — holds here is not a claim in markdown."), cell]
    if run:
        nb.metadata["lessonlib"] = {"run": run}
    path = tmp_path / "solutions" / "01_exact_rule.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_the_generated_block_quotes_the_stored_claims_and_counts_failures(tmp_path):
    good = claim("x ({x:.2f}) is above 1", True, show=False, x=1.5).text
    bad = claim("y ({y:.2f}) is above 1", False, show=False, y=0.5).text
    path = _notebook(tmp_path, [good, bad], run="regen-7")
    assert notes.claim_lines(path) == [good, bad]
    text = notes.block("01_exact_rule", tmp_path)
    assert "Stored run regen-7: 2 claims, 1 do not hold" in text and f"- {bad}" in text and "table" not in text


def test_render_replaces_each_block_and_refuses_notes_without_one(tmp_path):
    for _name, rel in notes.NOTEBOOKS.items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(), target)
    _notebook(tmp_path, [claim("z ({z}) holds", True, show=False, z=3).text])
    stale = "\n".join(f"## {n}\n{notes.BEGIN.format(name=n)}\nold typed numbers 1.23×\n{notes.END}"
                      for n in notes.NOTEBOOKS) + "\n## Catalogue\n" + "old typed list".join(notes.CATALOGUE)
    new = notes.render(stale, tmp_path)
    assert "1.23" not in new and "- z (3) holds — holds here" in new and new.count(notes.END) == len(notes.NOTEBOOKS)
    assert notes.render(new, tmp_path) == new
    with pytest.raises(ValueError, match="one generated block for 02_speedup"):
        notes.render(new.replace(notes.BEGIN.format(name="02_speedup"), ""), tmp_path)


def test_committed_notes_quote_the_stored_outputs():
    text = (ROOT / notes.NOTES).read_text(encoding="utf-8")
    assert notes.render(text) == text, "run: python -m lessonlib.course.notes"
    persian = (ROOT / notes.NOTES_FA).read_text(encoding="utf-8")
    assert notes.render(persian, lang="fa") == persian, "run: python -m lessonlib.course.notes"
    assert "- " + notes.claim_lines(ROOT / "solutions/fa/01_exact_rule.ipynb", "fa")[0] in persian


def test_the_persian_page_quotes_the_persian_edition_with_the_english_run(tmp_path):
    from lessonlib.course import messages
    from lessonlib.course.rtl import RLI

    _notebook(tmp_path, [claim("x ({x:.2f}) is above 1", True, show=False, x=1.5).text], run="regen-7")
    messages.use("fa")
    try:
        lines = [claim("x ({x:.2f}) is above 1", True, show=False, x=1.5).text,
                 claim("y ({y:.2f}) is above 1", False, show=False, y=0.5).text]
    finally:
        messages.use("en")
    assert lines[0].startswith(RLI)  # printed lines carry bidi isolates; the page quotes them without
    persian = _notebook(tmp_path / "fa", lines).read_bytes()
    (tmp_path / "solutions" / "fa").mkdir()
    (tmp_path / "solutions" / "fa" / "01_exact_rule.ipynb").write_bytes(persian)
    text = notes.block("01_exact_rule", tmp_path, lang="fa")
    assert "اجرای ذخیره‌شدهٔ regen-7: 2 claim، 1 تا برقرار نیستند" in text
    assert RLI not in text and "— در این اجرا برقرار است" in text and "holds here" not in text
    assert notes.claim_lines(tmp_path / "solutions" / "01_exact_rule.ipynb", "fa") == []  # negative control


def test_the_committed_record_was_built_from_the_committed_reports():
    """Each record row carries the run of the report it came from, and that is the committed report's run."""
    report = record.read("record", ROOT / "outputs" / "benchmarks")
    assert report is not None
    for source, run in report.get("source_runs", {}).items():
        committed = record.read(source, ROOT / "outputs" / "benchmarks")
        assert runs.of(committed) == run, f"record.json's {source} rows are from run {run}, {source}.json from " \
                                          f"{runs.of(committed)}: rebuild with python -m lessonlib.bench record"
    assert set(report.get("source_runs", {})) == set(report["sources"])


def test_the_committed_skill_file_was_rendered_from_the_committed_measurements():
    from lessonlib.course.skill.render import decision_block

    measurements = json.loads((ROOT / "outputs" / "benchmarks" / "temperature.json").read_text())
    decision = decision_block((ROOT / "outputs" / "skill-speculative-tuning.md").read_text())
    assert decision.get("measurements_run") == runs.of(measurements)


def test_the_committed_skill_file_is_what_its_measurements_render(tmp_path):
    """One renderer: the skill file in the repository is skill.write_skill(temperature.json, the record)."""
    from float_text import differences

    from lessonlib.course import skill

    written = skill.write_skill(ROOT / "outputs" / "benchmarks" / "temperature.json", tmp_path / "skill.md")
    # as text with numbers parsed (float_text: another CPU's floats differ in their last bits)
    assert not differences(written.read_text(), (ROOT / "outputs" / "skill-speculative-tuning.md").read_text()), \
        "re-execute solutions/05_high_temperature.ipynb (it writes both files)"


def test_notebook_05s_stored_excerpt_is_the_committed_skill_file():
    """The stored run of notebook 05 printed its excerpt by reading back the file it wrote: that file is the one
    committed (a notebook run whose outputs were not committed, or files from another run, fail here)."""
    import nbformat

    nb = nbformat.read(ROOT / "solutions" / "05_high_temperature.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", ())
                      if o.get("output_type") == "stream")
    text = (ROOT / "outputs" / "skill-speculative-tuning.md").read_text()
    excerpt = text[text.index("## Worked example"): text.index("## Sources")]
    assert excerpt.strip() and excerpt in printed


NOTEBOOKS_THAT_QUOTE = [p for p in regenerate.NOTEBOOKS if "record." in (ROOT / p).read_text(encoding="utf-8")]


def _quoted_line(path) -> str | None:
    nb = nbformat.read(ROOT / path, as_version=4)
    lines = [line for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", ())
             if o.get("output_type") == "stream" for line in o.get("text", "").splitlines()
             if line.startswith(record.QUOTED)]
    return lines[-1] if lines else None


def test_some_notebooks_quote_the_reports():
    assert len(NOTEBOOKS_THAT_QUOTE) >= 4, NOTEBOOKS_THAT_QUOTE


@pytest.mark.parametrize("path", NOTEBOOKS_THAT_QUOTE)
def test_each_stored_notebook_quotes_the_committed_reports_run(path):
    """A notebook that reads a benchmark report prints, last, which run each report it read came from; every
    one is the run of the committed report. A benchmark re-run (or a rebuilt record) without re-executing the
    notebooks that quote it fails here: the stored prose and tables would quote numbers the files no longer hold."""
    line = _quoted_line(path)
    assert line is not None, f"{path}: its last code cell must print record.quoted(); re-execute it"
    quoted = record.parse_quoted(line)
    assert quoted, f"{path} reads the record but its stored run quoted no report"
    for stem, run in quoted.items():
        committed = record.read(stem, ROOT / "outputs" / "benchmarks")
        assert committed is not None, f"{path} quotes {stem}.json, which is not committed"
        committed_run = runs.of(committed)  # the record's source runs are these files' (test above)
        assert run == str(committed_run or record.UNRECORDED), \
            f"{path} quotes {stem} from run {run}, but the committed {stem} is from run {committed_run}: " \
            f"re-execute {path}"


def test_quoted_names_each_report_read_and_its_run(tmp_path):
    """The line records what was read, and parse_quoted refuses a line it did not write (negative controls)."""
    from lessonlib.jsonio import write_atomic

    saved = dict(record._QUOTED)
    record._QUOTED.clear()
    try:
        assert record.parse_quoted(record.quoted()) == {}
        write_atomic(tmp_path / "kinds.json", json.dumps({"rows": [], "run": {"id": "run-k"}}))
        write_atomic(tmp_path / "record.json", json.dumps({"rows": [], "source_runs": {"decode": "run-d",
                                                                                        "tree": None}}))
        record.read("kinds", tmp_path)
        record.load(tmp_path)
        assert record.parse_quoted(record.quoted()) == {"kinds": "run-k", "decode": "run-d", "tree": record.UNRECORDED}
    finally:
        record._QUOTED.clear()
        record._QUOTED.update(saved)
    for bad in ("Runs: decode=x", record.QUOTED + "decode=", record.QUOTED + "decode x", record.QUOTED + "=x"):
        with pytest.raises(ValueError):
            record.parse_quoted(bad)


def test_the_persian_notes_translate_the_english_prose_as_it_is():
    """solutions/fa/README.md records the digest of the English prose it translates: an English edit
    without its Persian fails here (``notes --check`` says the same)."""
    assert notes.translation_current(), "translate the changed English prose into solutions/fa/README.md"


def test_the_prose_digest_follows_the_prose_not_the_generated_blocks():
    english = (paths.ROOT / notes.NOTES).read_text(encoding="utf-8")
    digest = notes.prose_digest(english)
    marker = notes.BEGIN.format(name="01_exact_rule") + "\n"
    assert notes.prose_digest(english.replace(marker, marker + "- a re-run's new claim line\n")) == digest
    begin = notes.CATALOGUE[0]
    assert notes.prose_digest(english.replace(begin, begin + "| a new wrong answer |\n")) == digest
    assert notes.prose_digest(english.replace("## How the notebooks are made", "## How notebooks are made")) != digest
