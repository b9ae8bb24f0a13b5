"""The README's Python example runs as written."""
import re
from pathlib import Path


def test_readme_example_runs(tmp_path, monkeypatch, capsys):
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})
    rounds, reason, eps = capsys.readouterr().out.split()[:3]
    assert int(rounds) == 100 and reason == "completed" and float(eps) <= 2.0
    assert (tmp_path / "run" / "metrics.jsonl").exists()
