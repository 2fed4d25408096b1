"""Input draws and edge cases run inside the ranks, on the rank's device: a tensor they make without `device=`
lands on the CPU, and mixing it with the rank's tensors fails only on GPU ranks (the reference then fails its
trials there while every CPU test passes: tasks/_delayed_fp8.py's boundary values and gsplat's beyond_clamp
camera point both did, found on a GPU). CPU ranks cannot show it, so this reads the source: in every function of
tasks/ that takes a draw (`draw`, or a generator `gen`), each torch factory call names its device."""
import ast
from pathlib import Path

TASKS = Path(__file__).resolve().parents[2] / "tasks"
FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "eye", "linspace", "rand", "randn",
             "randint", "randperm"}
DRAW_ARGUMENTS = {"draw", "gen"}


def device_less_factories(source: str) -> list[tuple[int, str, str]]:
    """(line, function, factory) of each torch factory call without `device=` in a function taking a draw."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef):
            continue
        arguments = {a.arg for a in function.args.args + function.args.kwonlyargs}
        if not arguments & DRAW_ARGUMENTS:
            continue
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                    and isinstance(call.func.value, ast.Name) and call.func.value.id == "torch" \
                    and call.func.attr in FACTORIES and not any(k.arg == "device" for k in call.keywords):
                found.append((call.lineno, function.name, call.func.attr))
    return found


def test_the_check_finds_a_device_less_tensor_in_an_edge_case():
    edge = ("def beyond(means, draw):\n"
            "    point = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)\n"
            "    return means + point\n")
    assert device_less_factories(edge) == [(2, "beyond", "tensor")]
    assert device_less_factories(edge.replace("torch.float64)", "torch.float64, device=means.device)")) == []


def test_every_draw_and_edge_case_makes_its_tensors_on_the_rank_s_device():
    offenders = [f"{path.relative_to(TASKS.parent)}:{line} {function}: torch.{factory}(...) without device="
                 for path in sorted(TASKS.rglob("*.py"))
                 for line, function, factory in device_less_factories(path.read_text())]
    assert not offenders, "\n".join(offenders)
