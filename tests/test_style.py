"""House style that a reader would otherwise police by hand: source lines of at most 120 characters."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINE = 120


def test_python_lines_fit_120_characters():
    long = [f"{path.relative_to(REPO)}:{number}: {len(line)}"
            for folder in ("jaxfl", "tests", "bench", "scripts")
            for path in sorted((REPO / folder).rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > MAX_LINE]
    assert not long, f"lines over {MAX_LINE} characters:\n" + "\n".join(long)
