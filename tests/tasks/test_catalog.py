"""docs/tasks.md is generated from the specs and must not go stale; `pkb-env tasks` groups by family."""
from pkb_env.entrypoints.cli import main as cli
from pkb_env.contract import FAMILIES
from pkb_env.catalog import DOC, main, markdown, rows
from pkb_env.task import load_task, task_names


def test_docs_tasks_md_is_up_to_date():
    assert main(["--check"]) == 0, "docs/tasks.md is stale: run `python -m pkb_env.catalog --write`"


def test_check_fails_on_a_stale_file(tmp_path, monkeypatch):
    stale = tmp_path / "tasks.md"
    stale.write_text(DOC.read_text().replace("| `all_reduce` |", "| `all_reducer` |"))
    monkeypatch.setattr("pkb_env.catalog.DOC", stale)
    assert main(["--check"]) == 1


def test_one_row_per_task_with_what_the_issue_asks_for():
    by_name = {r.name: r for r in rows()}
    assert set(by_name) == set(task_names())
    text = markdown()
    for name, row in by_name.items():
        spec = load_task(name)
        assert f"| `{name}` | {spec.pkb_id or '-'} |" in text
        assert row.dominant.split(" ")[0].rstrip(",") in {"communication", "compute", "memory", "W=2:", "W=4:"}
        assert row.world_sizes and row.departures


def test_pkb_env_tasks_groups_by_family(capsys):
    assert cli(["tasks"]) == 0
    seen = []
    for block in capsys.readouterr().out.strip().split("\n\n"):
        header, _, _, *lines = block.splitlines()      # "Title (family)", column names, dashes, rows
        family = header[header.rindex("(") + 1:-1]
        assert header == f"{FAMILIES[family].title} ({family})"
        for line in lines:
            name = line.split()[0]
            assert load_task(name).family == family, f"{name} is listed under {family}"
            seen.append(name)
    assert sorted(seen) == sorted(task_names())


def test_pkb_env_tasks_names_the_world_sizes_of_each_preset(capsys):
    """The default preset is tiny: the listing gives its world sizes beside bench's, each labelled."""
    assert cli(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "world sizes: tiny  bench" in out
    row = next(line for line in out.splitlines() if line.startswith("allgather_gemm "))
    tiny = ", ".join(map(str, load_task("allgather_gemm").allowed_world_sizes("tiny")))
    bench = ", ".join(map(str, load_task("allgather_gemm").allowed_world_sizes("bench")))
    assert tiny != bench and f"{tiny}   {bench}" in row
