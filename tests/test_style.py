"""House style that a reader would otherwise police by hand: source and prose lines of at most 120 characters."""
from pathlib import Path

from jaxfl.studies.tables import BLOCK, RENDERED

REPO = Path(__file__).resolve().parents[1]
MAX_LINE = 120


def test_python_lines_fit_120_characters():
    long = [f"{path.relative_to(REPO)}:{number}: {len(line)}"
            for folder in ("jaxfl", "tests", "bench", "scripts", "papers")
            for path in sorted((REPO / folder).rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > MAX_LINE]
    assert not long, f"lines over {MAX_LINE} characters:\n" + "\n".join(long)


def _prose_lines(text):
    """(number, line) of a markdown text's hand-written prose: not code fences, tables, images, links or the
    blocks that `jaxfl tables` generates (their lines are a study's own output; blanked, keeping line numbers)."""
    for generated in (BLOCK, RENDERED):
        text = generated.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        elif not (fenced or stripped.startswith(("|", "![")) or "://" in line):
            yield number, line


def test_markdown_prose_lines_fit_120_characters():
    built = {"_build", "_generated", "notebooks"}  # the docs build's own output (and its copies of the papers' READMEs)
    copies = {REPO / "docs" / "papers" / f"{readme.parent.name.replace('_', '-')}.md"   # docs/conf.py's copies
              for readme in REPO.glob("papers/*/README.md")}
    pages = [REPO / "README.md", REPO / "bench" / "README.md", *sorted(REPO.glob("papers/*/README.md")),
             *sorted(path for path in (REPO / "docs").rglob("*.md")
                     if not built & set(path.parts) and path not in copies)]
    long = [f"{path.relative_to(REPO)}:{number}: {len(line)}"
            for path in pages
            for number, line in _prose_lines(path.read_text(encoding="utf-8"))
            if len(line) > MAX_LINE]
    assert not long, f"markdown lines over {MAX_LINE} characters:\n" + "\n".join(long)
