"""Packaging: ``import jaxfl`` loads no optional dependency, and a missing extra is one error naming it."""
import subprocess
import sys
from pathlib import Path

import pytest

from jaxfl import extras

REPO = Path(__file__).resolve().parents[1]


def test_import_jaxfl_loads_no_optional_dependency():
    code = ("import sys, jaxfl, jaxfl.algorithms, jaxfl.accounting, jaxfl.audit, jaxfl.engine; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'sklearn', 'torch', 'opacus'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_the_library_never_imports_the_paper_homes():
    """``papers/`` sits beside the library (and outside the wheel: ``packages.find`` includes ``jaxfl*`` only);
    ``jaxfl`` finds the homes from a clone at run time (``jaxfl.studies.registry``) and never imports them itself."""
    offenders = [str(path.relative_to(REPO)) for path in sorted((REPO / "jaxfl").rglob("*.py"))
                 if any(line.lstrip().startswith(("import papers", "from papers"))
                        for line in path.read_text().splitlines())]
    assert offenders == []
    assert 'include = ["jaxfl*"]' in (REPO / "pyproject.toml").read_text()
    code = "import sys, jaxfl, jaxfl.studies; print(sorted(m for m in sys.modules if m.split('.')[0] == 'papers'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_the_version_is_the_changelogs():
    import jaxfl

    assert jaxfl.__version__ == "0.2.0"
    assert "## 0.2.0" in (REPO / "CHANGELOG.md").read_text()
    assert 'version = "0.2.0"' in (REPO / "pyproject.toml").read_text()


@pytest.mark.parametrize("module, extra", [("sklearn.datasets", "studies"), ("matplotlib.pyplot", "studies"),
                                           ("torch", "bench")])
def test_a_missing_extra_names_itself(monkeypatch, module, extra):
    monkeypatch.setitem(sys.modules, module.split(".")[0], None)   # import of a None entry fails
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(extras.MissingExtraError, match=rf"pip install 'jaxfl\[{extra}\]'"):
        extras.require(module)


def test_a_library_call_without_its_extra_says_which(monkeypatch):
    from jaxfl.data import load_breast_cancer

    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match=r"jaxfl\[studies\]"):
        load_breast_cancer()


def test_the_cli_reports_a_missing_extra_in_one_line(monkeypatch, capsys):
    from jaxfl import cli

    def needs_plots(args):
        extras.require("matplotlib")

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(cli, "_cmd_list", needs_plots)
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "jaxfl[studies]" in err


def test_an_unknown_missing_module_is_the_plain_import_error():
    with pytest.raises(ImportError) as caught:
        extras.require("no_such_module_anywhere")
    assert not isinstance(caught.value, extras.MissingExtraError)
