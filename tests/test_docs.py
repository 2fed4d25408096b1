"""The docs the code points to exist and say what the code does: design citations resolve to sections of
docs/architecture.md, every pip extra is named in the README and in the errors that ask for it, and what is
known not to hold is listed on one page, by topic (docs/known_holes.md)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for pattern in ("*.py", "*.yaml", "*.md", "*.toml") for p in ROOT.rglob(pattern)
           if not {".venv", ".git", "build", "node_modules"} & set(p.relative_to(ROOT).parts)]


def _extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def test_design_citations_resolve_to_sections_of_the_architecture_doc():
    """Citations read `docs/architecture.md, "Section"` (or with single quotes), possibly `"A" and "B"`,
    across line breaks; each must name the start of a `## ` heading there."""
    headings = re.findall(r"^## (.+)$", (ROOT / "docs" / "architecture.md").read_text(), re.MULTILINE)
    this = Path(__file__).resolve()
    cited = {}
    for path in SOURCES:
        if path.resolve() == this:
            continue
        text = re.sub(r"\s+", " ", path.read_text(errors="replace"))
        for match in re.finditer(r"docs/architecture\.md, ([\"'])(.+?)\1(?: and ([\"'])(.+?)\3)?", text):
            for name in (match.group(2), match.group(4)):
                if name:
                    cited.setdefault(name, path.relative_to(ROOT))
    assert len(cited) >= 5, f"too few citations found, the pattern is wrong: {cited}"
    missing = {name: str(p) for name, p in cited.items() if not any(h.startswith(name) for h in headings)}
    assert not missing, f"cited sections with no heading in docs/architecture.md: {missing}"


def test_no_citation_of_a_design_the_repository_does_not_ship():
    this = Path(__file__).resolve()
    offenders = [str(p.relative_to(ROOT)) for p in SOURCES if p.resolve() != this
                 and re.search(r"DESIGN §|shared/reference|\.\./shared", p.read_text(errors="replace"))]
    assert not offenders, offenders


def test_readme_names_every_extra():
    readme = (ROOT / "README.md").read_text()
    paragraph = next(p for p in readme.split("\n\n") if p.startswith("Extras:"))
    named = set(re.findall(r"`([a-z0-9]+)`\s[(/]", paragraph))  # "`name` (what it installs)"
    assert named == _extras(), f"README's extras paragraph {sorted(named)} vs pyproject {sorted(_extras())}"


def test_every_extra_asked_for_exists():
    asked = set()
    for path in SOURCES:
        asked |= set(re.findall(r"pkb-env\[([a-z0-9]+)\]", path.read_text(errors="replace")))
    asked |= {m for p in SOURCES if p.suffix == ".py"
              for m in re.findall(r"require\(\"[\w.]+\", \"(\w+)\"", p.read_text(errors="replace"))}
    assert asked and asked <= _extras(), sorted(asked - _extras())


KNOWN_HOLES_TOPICS = ("Code in a rank", "Containment", "Timing and roofline", "Verification and tolerances",
                      "Emulated ranks", "Scale-out", "Doors", "Episode datasets", "Closed since they were found")


def test_known_holes_live_on_one_page_with_a_section_per_topic():
    """docs/known_holes.md has a `## ` section per topic, each listing at least one hole; no other page of docs/
    keeps a known-holes section of its own (they link to that page)."""
    text = (ROOT / "docs" / "known_holes.md").read_text()
    sections = dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL))
    for topic in KNOWN_HOLES_TOPICS:
        assert topic in sections, f"docs/known_holes.md has no section '## {topic}'"
        assert re.search(r"^(- |\| )", sections[topic], re.MULTILINE), f"'## {topic}' lists no hole"
    elsewhere = [str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md") if p.name != "known_holes.md"
                 and re.search(r"^#+ .*known holes", p.read_text(), re.MULTILINE | re.IGNORECASE)]
    assert not elsewhere, f"known-holes sections outside docs/known_holes.md: {elsewhere}"


def test_the_readme_quotes_a_test_count_no_older_than_the_suite(request):
    """The README's "Run the tests (about N; ...)" is within 5% of what pytest collects now: counted by
    conftest.py as this session collected the whole suite, else by `pytest --collect-only` in a subprocess."""
    import subprocess
    import sys

    from conftest import SUITE_SIZE

    quoted = int(re.search(r"Run the tests \(about (\d+)", (ROOT / "README.md").read_text()).group(1))
    collected = request.config.stash.get(SUITE_SIZE, None)
    if collected is None:   # a part of the suite was collected (one file, -k, --lf ...)
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not gpu", "-p",
                               "no:cacheprovider", str(ROOT / "tests")], capture_output=True, text=True, cwd=ROOT,
                              timeout=300)
        collected = int(re.search(r"(\d+)(?:/\d+)? tests? collected", done.stdout).group(1))
    assert abs(quoted - collected) <= 0.05 * collected, f"README quotes {quoted} tests; pytest collects {collected}"


def test_the_readme_use_snippets_run_as_written(tmp_path, monkeypatch):
    """The README's "Use" section: the client's snippet runs as it stands on CPU ranks; the env's compiles (it is
    the client's door over the same judge)."""
    section = (ROOT / "README.md").read_text().split("## Use\n", 1)[1].split("\n## ", 1)[0]
    client, env = re.findall(r"```python\n(.*?)```", section, re.DOTALL)[:2]
    compile(env, "README.md (env)", "exec")
    monkeypatch.chdir(tmp_path)
    exec(compile(client, "README.md (client)", "exec"), {})
