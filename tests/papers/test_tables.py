"""``jaxfl tables``: the tables of README.md and papers/*/README.md are generated from the committed results."""
import json
import shutil
from pathlib import Path

import pytest

from jaxfl.studies import report, tables
from jaxfl.studies.registry import experiments

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [str(path.relative_to(ROOT)) for path in tables.documents(ROOT)]


def test_the_documents_are_the_readme_and_every_paper_homes():
    assert DOCUMENTS[:2] == ["README.md", "papers/README.md"] and len(DOCUMENTS) == 7
    assert tables.repo_root() == ROOT   # the tests run from the repository: its papers/ are found from there


@pytest.mark.parametrize("document", DOCUMENTS)
def test_docs_tables_equal_what_the_committed_results_give(document):
    text = (ROOT / document).read_text()
    assert tables.BLOCK.findall(text) or tables.RENDERED.findall(text)
    assert tables.generate(text, ROOT) == text, "run `jaxfl tables` after committing new results/"


def test_every_block_names_a_committed_results_file():
    for match in (m for d in DOCUMENTS for m in tables.BLOCK.finditer((ROOT / d).read_text())):
        for rel in match.group("path").split(","):
            assert (ROOT / rel / "results.json").is_file()


def _copy_results(rel, root):
    shutil.copytree(ROOT / rel, root / rel, ignore=shutil.ignore_patterns("checkpoints", "curves.csv", "parts", "gpu",
                                                                          "dp-tuned"))
    return json.loads((root / rel / "results.json").read_text())


def _write_results(doc, rel, root):
    (root / rel).mkdir(parents=True, exist_ok=True)
    (root / rel / "results.json").write_text(json.dumps(doc))


def test_a_combined_block_joins_the_panels_of_several_files(tmp_path):
    """One file's two panels split into two files (one marked as a GPU's): the combined block holds both panels'
    rows in the study's order, once each, with the one-file table's cells, and names each file's panels and
    machine."""
    rel = "papers/huang_jdp/results/table1-mnist"
    doc = _copy_results(rel, tmp_path)
    first, second = doc["config"]["panels"][:2]
    for sub, keep in (("cpu-half", first), ("gpu-half", second)):
        part = {**doc, "runs": [r for r in doc["runs"] if r["panel"] == keep],
                "config": {**doc["config"], "panels": [keep]}}
        if sub == "gpu-half":
            part["environment"] = {**doc["environment"], "backend": "gpu", "device_kind": "Some GPU", "cores": 16}
        _write_results(part, f"{rel}/{sub}", tmp_path)
    text = tables.block(tmp_path, f"{rel}/gpu-half,{rel}/cpu-half")
    whole = tables.block(tmp_path, rel)
    rows = [line for line in text.splitlines() if line.startswith(("| 4 |", "| 16 |"))]
    assert [line.split(" |")[0] for line in rows] == ["| 4", "| 16"]      # the study's panel order, not the block's
    assert all(line in whole for line in rows)                             # the same cells as the one-file table
    assert "**Panels not run**: n = 64, n = 128, n = 256, n = 512." in text
    assert f"From `{rel}/gpu-half/results.json` ({second}; full form; 16 cores, gpu (Some GPU)," in text
    assert f"From `{rel}/cpu-half/results.json` ({first}; full form; {doc['environment']['cores']} cores, cpu," in text


def test_figure1s_combined_block_checks_the_papers_claims_over_every_file(tmp_path):
    """Figure 1's panels split over two files (as n = 128 runs apart from n = 4, 16 and 64): the combined block
    holds every panel's rows of the one-file numbers table, and its claims are checked over all panels."""
    rel = "papers/huang_jdp/results/figure1/dp-tuned"
    doc = json.loads((ROOT / rel / "results.json").read_text())
    first, *rest = doc["config"]["panels"]
    assert rest
    for sub, keep in (("one", [first]), ("rest", rest)):
        _write_results({**doc, "runs": [r for r in doc["runs"] if r["panel"] in keep],
                        "config": {**doc["config"], "panels": keep}}, f"{rel}/{sub}", tmp_path)
    _write_results(doc, rel, tmp_path)
    text = tables.block(tmp_path, f"{rel}/rest,{rel}/one")
    whole = tables.block(tmp_path, rel)
    numbers = [line for line in whole.splitlines() if line[:4] in ("| 4 ", "| 16", "| 64")]
    assert len(numbers) == 5 * len(doc["config"]["panels"])
    assert [line for line in text.splitlines() if line[:4] in ("| 4 ", "| 16", "| 64")] == numbers
    claims = [line for line in whole.splitlines() if line[:3] in ("1. ", "2. ", "3. ")]
    assert len(claims) == 3 and all(line in text for line in claims)
    assert f"From `{rel}/one/results.json` ({first}; dp-tuned form;" in text
    marker = f"<!-- generated from {rel}/rest,{rel}/one -->\n{text}<!-- end generated -->\n"
    assert tables.draw_combined_figures(marker, tmp_path) == [tmp_path / rel / "rest" / tables.COMBINED_FIGURE]
    assert (tmp_path / rel / "rest" / tables.COMBINED_FIGURE).stat().st_size > 10_000


def test_a_combined_block_refuses_a_panel_twice_another_study_or_a_study_without_a_combined_table(tmp_path):
    rel, other = "papers/huang_jdp/results/table1-mnist", "papers/huang_jdp/results/noise"
    doc = _copy_results(rel, tmp_path)
    _write_results(doc, f"{rel}/again", tmp_path)
    with pytest.raises(ValueError, match="panel 'n = 4' is in both"):
        tables.block(tmp_path, f"{rel},{rel}/again")
    _copy_results(other, tmp_path)
    with pytest.raises(ValueError, match="cannot be combined"):
        tables.block(tmp_path, f"{rel},{other}")
    with pytest.raises(ValueError, match="has no combined table"):
        tables.block(tmp_path, f"{other},{other}")


def test_summary_md_of_each_committed_run_is_its_studys_summary():
    """results/*/summary.md was written by the same report from the same document (no hand edits)."""
    known = experiments()
    paths = sorted([*ROOT.glob("results/**/results.json"), *ROOT.glob("papers/*/results/**/results.json")])
    assert paths
    for path in paths:
        doc = json.loads(path.read_text())
        form_report = tables._report_of(known[doc["experiment"]].study, doc)
        assert (path.parent / "summary.md").read_text() == report.summary(doc, form_report) + "\n"


def test_check_flags_a_hand_edited_number(tmp_path):
    rel = next(tables.BLOCK.finditer((ROOT / DOCUMENTS[2]).read_text())).group("path")   # a paper home's README
    shutil.copytree(ROOT / rel, tmp_path / rel, ignore=shutil.ignore_patterns("checkpoints", "curves.csv"))
    docs = tmp_path / "docs.md"
    docs.write_text(f"intro\n<!-- generated from {rel} -->\nold\n<!-- end generated -->\noutro\n")
    assert tables.main(docs=docs, root=tmp_path) == 0
    generated = docs.read_text()
    assert generated.startswith("intro\n") and generated.endswith("<!-- end generated -->\noutro\n")
    assert "old\n" not in generated and f"From `{rel}/results.json`" in generated
    assert tables.main(check=True, docs=docs, root=tmp_path) == 0
    docs.write_text(generated.replace("| ", "| 9.99", 1))
    assert tables.main(check=True, docs=docs, root=tmp_path) == 1


def test_a_block_without_results_is_an_error(tmp_path):
    docs = tmp_path / "docs.md"
    docs.write_text("<!-- generated from results/demo -->\n<!-- end generated -->\n")
    with pytest.raises(FileNotFoundError, match="results/demo"):
        tables.main(docs=docs, root=tmp_path)


def test_cli_check_passes_on_the_committed_docs(capsys):
    from jaxfl.cli import main

    assert main(["tables", "--check"]) == 0
    assert "DIFFER" not in capsys.readouterr().out


def test_a_block_says_when_workers_ran_the_sitting(tmp_path):
    rel = "results/demo"
    shutil.copytree(ROOT / rel, tmp_path / rel, ignore=shutil.ignore_patterns("checkpoints", "curves.csv"))
    doc = json.loads((tmp_path / rel / "results.json").read_text())
    doc["config"]["workers"] = {"count": 2, "wall_seconds": 1234.4}
    (tmp_path / rel / "results.json").write_text(json.dumps(doc))
    assert "this sitting's 2 workers took 1,234 s of wall time" in tables.block(tmp_path, rel)
    doc["config"].update(parts_reused=3, parts_seconds_total=99.0)   # grid programs the workers ran, then collected
    (tmp_path / rel / "results.json").write_text(json.dumps(doc))
    text = tables.block(tmp_path, rel)
    assert "3 of them run by this sitting's workers or in earlier sittings" in text
    del doc["config"]["workers"]
    (tmp_path / rel / "results.json").write_text(json.dumps(doc))
    assert "3 of them run in earlier sittings;" in tables.block(tmp_path, rel)


def test_a_variant_with_its_own_report_is_summarised_with_it():
    """dp-learning-rate's low-rates variants lay out their own rates: their summary has those columns, not the
    base grid's (empty) ones."""
    from papers.huang_jdp import paper as HP

    doc = json.loads((ROOT / "papers/huang_jdp/results/dp-learning-rate/low-rates/results.json").read_text())
    text = tables.block(ROOT, "papers/huang_jdp/results/dp-learning-rate/low-rates")
    for lr in HP.LOW_DP_RATES:
        assert f"{HP.FULL}, learning rate {lr:g} |" in text
    assert f"{HP.FULL}, learning rate 0.3 |" not in text and "|  |" not in text
    assert doc["config"]["form"] == "full+low-rates"


def test_a_block_generated_by_a_home_renderer_is_rewritten_and_checked(tmp_path):
    """``<!-- generated by MODULE:ARG -->``: MODULE.render(root, ARG) replaces the block (the lowy-convex ablation)."""
    stale = "<!-- generated by papers.lowy_convex.ablation:obesity -->\nold numbers\n<!-- end generated -->\n"
    fresh = tables.generate(stale, ROOT)
    assert "old numbers" not in fresh and "`ablation-sum-gradient`" in fresh
    assert fresh.endswith("<!-- end generated -->\n")
    assert tables.generate(fresh, ROOT) == fresh
    with pytest.raises(FileNotFoundError, match="jaxfl reproduce lowy-convex/obesity"):
        tables.generate(stale, tmp_path)                  # a results file missing: the error says how to make it
