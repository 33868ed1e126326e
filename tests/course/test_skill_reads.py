"""Reports read with missing fields or fields of the wrong type (issue 54, item 5): the skill
file and ``bench record`` name the file and the command that rebuilds *that* report, never a
KeyError or another benchmark's command. Each refusal has a control that renders."""
import copy
import json
import shutil

import pytest

from lessonlib import paths
from lessonlib.bench import record
from lessonlib.course import skill

SHIPPED = paths.ROOT / "outputs" / "benchmarks"


@pytest.fixture(scope="module")
def measurements():
    return skill.load_measurements(SHIPPED / "temperature.json")


@pytest.fixture(scope="module")
def record_rows():
    return json.loads((SHIPPED / "record.json").read_text())["rows"]


@pytest.fixture(scope="module")
def batch():
    return json.loads((SHIPPED / "batch.json").read_text())


def test_the_shipped_reports_render(measurements, record_rows, batch):
    """The control for every refusal below: the same reports, untouched, render."""
    text = skill.build_skill(measurements, record_rows, batch=batch)
    assert "## Concurrency: measured" in text


@pytest.mark.parametrize("damage", ["drop speedup median", "drop family", "speedup is a number", "rows of lists"])
def test_a_record_row_without_its_fields_names_record_json_and_its_command(measurements, record_rows, damage,
                                                                          tmp_path, monkeypatch):
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path))
    rows = copy.deepcopy(record_rows)
    sampled = [r for r in rows if r["source"] == "sampled" and r.get("speedup")]
    tree = [r for r in rows if r["source"] == "tree"]
    assert sampled and tree
    if damage == "drop speedup median":
        for r in sampled:
            del r["speedup"]["median"]
    elif damage == "drop family":
        for r in tree:
            del r["family"]
    elif damage == "speedup is a number":
        for r in sampled:
            r["speedup"] = 1.5
    else:
        rows = [list(r) for r in rows]
    with pytest.raises(ValueError, match=r"record\.json lacks a field.*rebuild it with: python -m lessonlib\.bench "
                                         r"record"):
        skill.build_skill(measurements, rows, batch={})


@pytest.mark.parametrize("damage", ["no rows", "no best_k", "no latency", "best_k matches no chain", "rows a number"])
def test_a_batch_report_without_its_fields_names_batch_json_and_its_command(measurements, batch, damage):
    report = copy.deepcopy(batch)
    if damage == "no rows":
        del report["rows"]
    elif damage == "no best_k":
        del report["rows"][0]["best_k"]
    elif damage == "no latency":
        del report["latency"]
    elif damage == "best_k matches no chain":
        for r in report["rows"]:
            r["best_k"] = 999
    else:
        report["rows"] = 3
    with pytest.raises(ValueError, match=r"batch\.json lacks a field.*rebuild it with: python -m lessonlib\.bench "
                                         r"batch"):
        skill.build_skill(measurements, (), batch=report)


@pytest.mark.parametrize("stem", ["sampled", "batch", "peers", "kinds", "tree", "decode"])
def test_bench_record_names_the_report_with_wrong_types_and_its_own_command(stem, tmp_path):
    """Each report's rows of the wrong type: the error names that file and ``bench STEM``
    (before: the folder, and "decode, tree or kinds" for every report)."""
    shutil.copy(SHIPPED / f"{stem}.json", tmp_path / f"{stem}.json")
    assert record.collect(tmp_path)  # control: the shipped report gives rows
    report = json.loads((tmp_path / f"{stem}.json").read_text())
    key = "record_rows" if stem == "batch" else "rows"
    report[key] = [["not", "a", "row"]] + report[key]
    (tmp_path / f"{stem}.json").write_text(json.dumps(report))
    with pytest.raises(ValueError, match=rf"{stem}\.json lacks a field the record needs or holds one of the wrong "
                                         rf"type.*rebuild it with: python -m lessonlib\.bench {stem}$"):
        record.collect(tmp_path)
    report[key] = report[key][1:]
    report["setup" if stem != "decode" else "settings"] = "not a dict"
    (tmp_path / f"{stem}.json").write_text(json.dumps(report))
    with pytest.raises(ValueError, match=rf"{stem}\.json .*python -m lessonlib\.bench {stem}$"):
        record.collect(tmp_path)
