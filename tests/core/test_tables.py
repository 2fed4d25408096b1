"""Terminal tables (pkb_env/tables.py, issue 47 row 12): no exponent form, one number of decimals per column, and a
column of numbers with gaps still right-aligned (a reward column read "-0.8" above "0.3457", a stage table
"3.034e+04" ms)."""
from pkb_env.tables import table


def test_a_column_of_numbers_lines_up_on_its_decimal_point():
    text = table(["file", "speedup", "reward"], [["a.py", 1.0712, 0.3456789], ["b.py", None, -0.8],
                                                 ["c.py", 12.0, 1.0]])
    lines = text.splitlines()
    assert lines[2:] == ["a.py    1.071   0.3457", "b.py        -  -0.8000", "c.py   12.000   1.0000"], text
    assert len({line.rindex(".") for line in lines[2:]}) == 1   # the reward's decimal points in one column


def test_large_and_small_figures_print_without_exponents():
    text = table(["stage", "ms"], [["build", 49.41], ["reference", 30340.12], ["parse", 0.45]])
    assert "e+" not in text and "30340.12" in text and "    0.45" in text
    assert "0.000012" in table(["x"], [[1.2e-05]])
