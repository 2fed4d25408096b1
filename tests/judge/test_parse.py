"""parse_action: the code a completion carries, or an error naming the problem and the fix."""
from __future__ import annotations

import pytest

from pkb_env.judge.parse import parse_action

MODULE = '''import torch
import torch.distributed as dist


def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''

DRAFT = '''import torch


def solution(tensor):
    return tensor  # first draft
'''


def test_bare_code_is_taken_whole():
    r = parse_action(MODULE)
    assert r.error is None and r.code == MODULE and r.from_fence is False
    assert r.action_chars == len(MODULE)


def test_python_fence_with_leading_prose():
    text = f"Here is a faster kernel using a ring.\n\n```python\n{MODULE}```\n\nIt overlaps copies."
    r = parse_action(text)
    assert r.error is None and r.from_fence is True
    assert r.code == MODULE


@pytest.mark.parametrize("tag", ["python", "py", "Python", "python3", "", "python title=solution.py", "{.python}"])
def test_accepted_tags(tag):
    r = parse_action(f"Answer:\n```{tag}\n{MODULE}```\n")
    assert r.code == MODULE, tag


def test_tilde_fence():
    r = parse_action(f"Sure.\n~~~python\n{MODULE}~~~\n")
    assert r.code == MODULE and r.from_fence


def test_longer_fence_holds_inner_backticks():
    inner = MODULE + '\nDOC = """\n```\nnot a fence end\n```\n"""\n'
    r = parse_action(f"````python\n{inner}````\n")
    assert r.code == inner


def test_unterminated_final_fence_runs_to_end():
    r = parse_action(f"Draft:\n```python\n{MODULE}")
    assert r.code == MODULE and r.from_fence


def test_last_block_defining_solution_wins():
    text = (f"First try:\n```python\n{DRAFT}```\nThat was slow; revised:\n```python\n{MODULE}```\n"
            "Run it with:\n```python\nprint(solution(x))\n```\n")
    r = parse_action(text)
    assert r.code == MODULE


def test_other_languages_are_skipped():
    text = (f"```bash\npip install cupy\n```\n```cuda\n__global__ void k() {{}}\n```\n"
            f"```python\n{MODULE}```\n```text\nsolution = nothing here\n```\n")
    assert parse_action(text).code == MODULE


def test_mislabelled_block_that_defines_solution_is_used():
    r = parse_action(f"```cpp\n{MODULE}```\n")
    assert r.code == MODULE and r.from_fence


def test_python_block_without_solution_is_still_returned_for_the_screen():
    r = parse_action("```python\nimport torch\nx = 1\n```\n")
    assert r.error is None and r.code == "import torch\nx = 1\n"


def test_only_non_python_blocks_is_an_error():
    r = parse_action("```bash\nnvcc kernel.cu\n```\n```json\n{}\n```")
    assert r.code is None and "bash" in r.error and "```python" in r.error


def test_indented_fence_is_dedented():
    body = "\n".join("    " + line if line else "" for line in MODULE.splitlines())
    r = parse_action(f"1. The module:\n    ```python\n{body}\n    ```\n")
    assert r.code == MODULE


def test_crlf_and_bom_are_normalised():
    r = parse_action("\ufeff" + MODULE.replace("\n", "\r\n"))
    assert r.code == MODULE


def test_fence_inside_a_valid_module_docstring_does_not_hide_the_module():
    module = '"""Usage:\n\n```python\nout = solution(x)\n```\n"""\n' + MODULE
    r = parse_action(module)
    assert r.code == module and r.from_fence is False


def test_think_block_drafts_lose_to_the_final_answer():
    text = f"<think>\nmaybe\n```python\n{DRAFT}```\n</think>\nFinal:\n```python\n{MODULE}```"
    assert parse_action(text).code == MODULE


def test_utf8_bytes_are_decoded():
    r = parse_action(("# résumé: ∑ over ranks\n" + MODULE).encode("utf-8"))
    assert r.error is None and r.code.startswith("# résumé")


def test_non_utf8_bytes_are_an_error():
    r = parse_action(b"def solution(x):\n    return x  # \xff\xfe\n")
    assert r.code is None and "UTF-8" in r.error and "byte" in r.error


def test_replacement_characters_are_noted_not_refused():
    """A file read with errors="replace" (the CLI's FileAgent) reaches the judge with U+FFFD in it: say so."""
    r = parse_action(b"# caf\xe9\n".decode("utf-8", errors="replace") + MODULE)
    assert r.error is None and r.code.startswith("# caf\ufffd")
    assert "1 U+FFFD replacement character(s), the first on line 1" in r.note and "UTF-8" in r.note
    fenced = parse_action(f"Here:\n```python\n{MODULE}x = '\ufffd\ufffd'\n```\n")
    assert "2 U+FFFD" in fenced.note and "line 9" in fenced.note
    assert parse_action(MODULE).note is None


@pytest.mark.parametrize("action", [None, 42, ["def solution(x): pass"], {"code": MODULE}])
def test_non_text_actions_are_errors(action):
    r = parse_action(action)
    assert r.code is None and "must be a str" in r.error and type(action).__name__ in r.error


@pytest.mark.parametrize("action", ["", "   \n\t\n", b""])
def test_empty_action(action):
    r = parse_action(action)
    assert r.code is None and "empty" in r.error and "solution" in r.error


def test_megabyte_action_is_refused_with_the_limit():
    r = parse_action("x" * (1 << 20))
    assert r.code is None and r.action_chars == 1 << 20
    assert "1,048,576 characters" in r.error and "200,000" in r.error and "only the module" in r.error


def test_custom_limit():
    assert parse_action(MODULE, max_chars=10).error is not None
    assert parse_action(MODULE, max_chars=len(MODULE)).error is None


def test_huge_bytes_are_refused_before_decoding():
    r = parse_action(b"x" * (1 << 24))
    assert r.code is None and "bytes" in r.error and "200,000" in r.error


def test_nul_byte_is_an_error():
    r = parse_action(MODULE + "\x00junk")
    assert r.code is None and "NUL" in r.error and f"{len(MODULE):,}" in r.error


def test_empty_python_block_is_an_error():
    r = parse_action("```python\n```\n")
    assert r.code is None and "empty" in r.error
