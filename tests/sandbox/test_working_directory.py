"""Judging works from any working directory, containment errors give the advice that fits, and a failed
start leaves nothing in the temporary directory (issue 15, item 1)."""
import os
import subprocess
import sys

import pytest

from pkb_env.sandbox.containment import Containment, containment_advice

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The tests' short timing protocol (conftest.FAST's): the step is still calibrated for and timed, in a fraction of
# the production protocol's seconds.
JUDGE = """
import gymnasium, pkb_env
from pkb_env.config import JudgeConfig, TimingProtocol
env = gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=2, executor="cpu",
                     config=JudgeConfig(protocol=TimingProtocol.quick("host")))
obs, _ = env.reset(seed=0)
_, _, _, _, info = env.step(obs["reference"])
print("VERDICT", info["verdict"], info["feedback"].splitlines()[0])
env.close()
"""


@pytest.mark.parametrize("cwd", ["/", CHECKOUT])   # the root, and the checkout (whose folders could shadow imports)
def test_judging_works_from_any_directory(cwd, tmp_path):
    env = {**os.environ, "PKB_ENV_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", JUDGE], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert "VERDICT correct" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_a_failed_start_leaves_no_directory(tmp_path):
    """Required containment refused (namespaces off): the error names the real conflict, and the executor's
    directory is gone even though the script never closed the env."""
    script = JUDGE.replace('print("VERDICT"', '#').replace("env.close()", "")
    env = {**os.environ, "TMPDIR": str(tmp_path), "PKB_ENV_NAMESPACES": "0", "PKB_ENV_REQUIRE_CONTAINMENT": "1",
           "PKB_ENV_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "ContainmentError" in proc.stderr, proc.stderr[-3000:]
    assert "unset one of the two" in proc.stderr and "as root" not in proc.stderr, proc.stderr[-3000:]
    assert not [p for p in os.listdir(tmp_path) if p.startswith("pkb-")], os.listdir(tmp_path)


@pytest.mark.parametrize("root", [True, False])
def test_advice_fits_the_cause(root):
    wanted = Containment(namespaces=True, required=True)
    required = containment_advice({"cause": "required", "root": root}, wanted)
    assert ("run the judge as root" in required) is not root, required
    assert "unset PKB_ENV_REQUIRE_CONTAINMENT" in required
    setup = containment_advice({"cause": "setup", "root": root}, wanted)
    assert "as root" not in setup and "PKB_ENV_NAMESPACES=0" in setup
    off = Containment(namespaces=False, required=True)
    assert "unset one of the two" in containment_advice({"cause": "required", "root": root}, off)
