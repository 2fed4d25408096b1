"""The compile service is no way out (issue 14): what a candidate asks the judge to compile runs contained.

Each row of the issue's table, on CPU ranks (nvcc and g++ compile here; NVRTC where CuPy is installed):
an extension's static initialiser that writes a host marker, reaches for the network, the kernel cache
and the package's source; an nvcc `-ccbin` directory holding a `gcc` script; `#include`s of /etc/shadow,
of a root-only file and of a 0600 file in the judge's home; response files. Then the second wall on its
own: a build cell given such an include without the judge's checks finds no such file. The checks alone, on
sources and options: tests/judge/test_compile_checks.py.
"""
import ast
import os
import re
import secrets
import shutil
import socket
import threading
from pathlib import Path

import pytest

import pkb_env
from conftest import FAST
from pkb_env.config import JudgeConfig, default_cache_dir
from pkb_env.executors import make_executor
from pkb_env.sandbox.containment import Containment
from pkb_env.sandbox.privileges import NOBODY
from pkb_env.sandbox.variables import MULTICAST_OFF
from pkb_env.runtime.toolchain import nvcc_path
from pkb_env.wire.services import Compile

NAMESPACES = Containment.of(JudgeConfig()).missing()
needs_namespaces = pytest.mark.skipif(NAMESPACES is not None, reason=f"no namespaces here: {NAMESPACES}")
needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed")
needs_compilers = pytest.mark.skipif(nvcc_path() is None or shutil.which("g++") is None or
                                     shutil.which("ninja") is None, reason="needs nvcc, g++ and ninja")
try:
    import cupy  # noqa: F401
    BACKENDS = ["nvcc", "nvrtc"]
except ImportError:
    BACKENDS = ["nvcc"]


@pytest.fixture(scope="module")
def judge_secret_files():
    """A root-only file outside any home and a 0600 file in the judge's home, holding a secret each."""
    value = "pkb-secret-" + secrets.token_hex(8)
    home_dir = os.path.join(os.path.expanduser("~"), f".pkb-env-test-{secrets.token_hex(4)}")
    outside_dir = f"/var/lib/pkb-env-test-{secrets.token_hex(4)}" if os.geteuid() == 0 else None
    made = {}
    for name, folder in (("home", home_dir), ("root_only", outside_dir)):
        if folder is None:
            continue
        os.makedirs(folder, mode=0o700)
        path = os.path.join(folder, "secret.h")
        with open(path, "w") as f:
            f.write(f"password={value}\n")
        os.chmod(path, 0o600)
        made[name] = path
    yield value, made
    for path in made.values():
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


@pytest.fixture(scope="module")
def build_cells():
    """An executor of its own, for its build cells alone (the Executor interface's `build`): the judge's checks
    come before a build, so only a build asked of the executor directly shows the second wall."""
    executor = make_executor(FAST.replace(executor="cpu", world_size=2))
    yield executor
    executor.close()


def _step(judge, body: str):
    code = "from pkb_env.runtime import compile_cubin\n" + body
    return judge.judge("all_reduce", code)


# -- compiler options are data ----------------------------------------------------------------------
@needs_nvcc
@needs_namespaces
def test_a_ccbin_script_never_runs(judge2):
    marker = f"/var/tmp/pkb-ccbin-ran-{secrets.token_hex(4)}"
    record = _step(judge2, f'''import os
fake = os.path.join(os.getcwd(), "bin")
os.makedirs(fake, exist_ok=True)
with open(os.path.join(fake, "gcc"), "w") as f:
    f.write("#!/bin/sh\\necho ran > {marker}\\nexit 1\\n")
os.chmod(os.path.join(fake, "gcc"), 0o755)
results = []
for options in (["-ccbin", fake], ["--compiler-bindir=" + fake], ["-Xcompiler", "-fplugin=x.so"],
                ["-Xlinker", "-T,/etc/shadow"]):
    try:
        compile_cubin('extern "C" __global__ void k() {{}}', options=options, backend="nvcc", arch="90")
        results.append("COMPILED " + options[0])
    except Exception as exc:
        results.append(str(exc).split(".")[0])
raise RuntimeError(" | ".join(results))
def solution(tensor):
    return tensor
''')
    feedback = record.feedback
    assert record.verdict.value == "build_error", feedback
    assert "COMPILED" not in feedback, feedback
    for option in ("'-ccbin' refused", "'--compiler-bindir=", "'-Xcompiler' refused", "'-Xlinker' refused"):
        assert option in feedback, feedback
    assert not os.path.exists(marker), "the candidate's compiler script ran on the host"


@pytest.mark.parametrize("backend", BACKENDS)
def test_includes_of_secrets_are_refused_before_compiling(judge2, judge_secret_files, backend):
    value, files = judge_secret_files
    targets = ["/etc/shadow", *files.values()]
    record = _step(judge2, f'''results = []
for path in {targets!r}:
    try:
        compile_cubin('#include "' + path + '"\\nextern "C" __global__ void k() {{}}', backend={backend!r}, arch="90")
        results.append("COMPILED " + path)
    except Exception as exc:
        results.append(str(exc))
raise RuntimeError(" | ".join(results))
def solution(tensor):
    return tensor
''')
    feedback = record.feedback
    assert record.verdict.value == "build_error", feedback
    assert "COMPILED" not in feedback and value not in feedback and value not in str(record.to_dict())
    for path in targets:
        assert f'`#include "{path}"` refused' in feedback, feedback


@pytest.mark.parametrize("backend", BACKENDS)
@needs_namespaces
def test_a_build_cell_cannot_read_them_either(build_cells, judge_secret_files, backend):
    """The second wall alone: a build given such includes without the judge's checks finds no such file."""
    if backend == "nvcc" and nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    value, files = judge_secret_files
    for path in ["/etc/shadow", *files.values()]:
        outcome = build_cells.build(Compile(f'#include "{path}"\n', "90", backend=backend), timeout=120)
        assert outcome.contained and not outcome.ok
        assert value not in outcome.log and "root:" not in outcome.log
        assert "cannot open source file" in outcome.log or "No such file" in outcome.log, outcome.log


# -- an extension's initialiser runs only in cells, with the multicast switches set ---------------------
# One extension for both checks below (its build, g++ on torch's headers, is 40-50 s of a CI run): an initialiser
# that records the environment it runs in, in its own file (once in the build cell, whose bytes the judge caches
# and the rank receives, once in the rank that imports them), and one that attacks the host (only where cells
# have namespaces: without, nothing would stop it).
INITIALISER = r"""
#include <torch/extension.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fstream>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

extern char** environ;
std::string probe();
static int recorded = [] {
    std::string env = "ENV";
    env += "REC{";   // built here, so that the marker is not in the object's own strings
    for (char** e = environ; *e; ++e) {
        std::string kv(*e);
        if (kv.rfind("NCCL_", 0) == 0 || kv.rfind("TORCH_SYMM", 0) == 0 || kv.rfind("NVSHMEM_", 0) == 0)
            env += kv + ";";
    }
    env += "}";
    Dl_info info;
    if (dladdr((void*)&probe, &info) && info.dli_fname) {
        std::ofstream f(info.dli_fname, std::ios::app | std::ios::binary);
        f << env;
    }
    return 0;
}();
static std::string seen;
@ATTACK@
std::string probe() { return seen; }
"""
ATTACK = r"""
static bool wrote(const std::string& path) { std::ofstream f(path); f << "pwned by " << getuid(); return f.good(); }
static int probe_at_load = [] {
    seen += wrote("@MARKER@") ? "marker:written " : "marker:refused ";
    seen += wrote("@CACHE@/kernels/pwned.cubin") ? "CACHE:WRITTEN " : "cache:refused ";
    seen += wrote("@PACKAGE@/pwned.py") ? "PACKAGE:WRITTEN " : "package:refused ";
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(@PORT@);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    seen += connect(s, (sockaddr*)&a, sizeof a) == 0 ? "NET:CONNECTED " : "net:refused ";
    seen += "uid=" + std::to_string(getuid());
    return 0;
}();
"""


@pytest.fixture(scope="module")
def initialiser_steps(judge2):
    """The extension judged twice (the second from the judge's cache): {'record', 'again', 'marker', 'package',
    'accepted' (connections the judge's port took)}; the marker removed and the port closed afterwards."""
    marker = f"/var/tmp/pkb-escape-marker-{secrets.token_hex(4)}"
    package = os.path.dirname(pkb_env.__file__)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted = []

    def accept():
        try:
            accepted.append(server.accept())
        except OSError:
            pass  # the socket was closed at the end of the module: nobody connected

    threading.Thread(target=accept, daemon=True).start()
    attack = (ATTACK.replace("@MARKER@", marker).replace("@CACHE@", default_cache_dir())
              .replace("@PACKAGE@", package).replace("@PORT@", str(server.getsockname()[1])))
    source = INITIALISER.replace("@ATTACK@", attack if NAMESPACES is None else "")
    code = f"""from pkb_env.runtime import load_inline
import re
ext = load_inline("pkb_escape_probe", cpp_sources={source!r}, functions=["probe"])
data = open(ext.__file__, "rb").read().decode("latin-1")
raise RuntimeError("PROBE " + ext.probe() + " RECORDS " + repr(re.findall("ENVREC[{{]([^}}]*)[}}]", data)))
def solution(tensor):
    return tensor
"""
    try:
        record = judge2.judge("all_reduce", code)
        again = judge2.judge("all_reduce", code)
        yield {"record": record, "again": again, "marker": marker, "package": package, "accepted": accepted}
    finally:
        server.close()
        if os.path.exists(marker):
            os.unlink(marker)


@needs_compilers
@needs_namespaces
def test_an_initialiser_runs_only_inside_cells(judge2, initialiser_steps):
    """The first row of the issue: a load_inline extension whose static initialiser attacks the host."""
    record, marker, package = initialiser_steps["record"], initialiser_steps["marker"], initialiser_steps["package"]
    feedback = record.feedback
    assert record.verdict.value == "build_error" and "PROBE marker:written" in feedback, feedback
    uid = NOBODY if f"uid {NOBODY}" in judge2.isolation()["privileges"] else None   # the candidates' uid, in words
    assert f"cache:refused package:refused net:refused uid={os.getuid() if uid is None else uid}" in feedback, \
        feedback
    assert not os.path.exists(marker), "the initialiser wrote on the host"
    assert not os.path.exists(os.path.join(package, "pwned.py"))
    assert not (Path(default_cache_dir()) / "kernels" / "pwned.cubin").exists()
    assert not initialiser_steps["accepted"], "the initialiser reached the judge's network"
    built = list((Path(default_cache_dir()) / "extensions").glob("*/pkb_escape_probe.so"))
    assert len(built) == 1, "the judge caches what the contained build produced"
    # The same source again: the cached bytes, no second build.
    again = initialiser_steps["again"]
    assert "PROBE marker:written" in again.feedback and again.stage_seconds["build"] < \
        record.stage_seconds["build"], (again.stage_seconds, record.stage_seconds)


@needs_compilers
def test_a_build_cell_runs_with_the_switches_set(initialiser_steps):
    """NVLink multicast's switches (tests/judge/test_multicast.py) in the build cell, where the initialiser ran
    first (those bytes are what the rank receives), then in the rank that imports them."""
    record = initialiser_steps["record"]
    feedback = record.feedback
    assert record.verdict.value == "build_error" and not record.exploit_flags, feedback
    records = ast.literal_eval(re.search(r"RECORDS (\[.*?\])", feedback).group(1))
    assert len(records) == 2, feedback   # the build cell's, then the rank's
    for seen in records:
        for name, value in MULTICAST_OFF.items():
            assert f"{name}={value};" in seen, (name, seen)


@needs_nvcc
def test_a_source_the_compiler_refused_fails_again_from_memory_and_a_stopped_build_is_not_remembered(judge2,
                                                                                                   monkeypatch):
    """The same request, refused by nvcc, is answered the second time with the first answer and no build cell:
    building it again cost a PKB file its whole trial on the GPU (pkb_env/judge/compiler.py). A build stopped
    by its deadline says nothing about the sources: the next request builds."""
    import time

    token = secrets.token_hex(6)
    request = Compile(source=f"__global__ void k(float* x) {{ x[0] = undefined_{token}; }}\n", arch="90",
                      backend="nvcc")
    executor = judge2.executor
    real, builds = executor.build, []
    monkeypatch.setattr(executor, "build", lambda job, timeout: builds.append(job) or real(job, timeout))

    stopped = judge2.prebuild(request, until=time.monotonic() + 0.05)
    assert stopped and "stopped" in stopped and len(builds) == 1, stopped
    first = judge2.prebuild(request)
    assert first and f"undefined_{token}" in first and "remembers" not in first and len(builds) == 2, first
    again = judge2.prebuild(request)
    assert again.startswith(first) and "the judge remembers this failure" in again and len(builds) == 2, again
    fixed = judge2.prebuild(Compile(source=f"__global__ void k(float* x) {{ x[0] = 1.0f; }} // {token}\n",
                                    arch="90", backend="nvcc"))
    assert fixed is None and len(builds) == 3, fixed


@needs_nvcc
def test_a_kernel_refused_inside_the_first_call_is_a_build_error(judge2):
    """Most of PKB's corpus builds its extension lazily, inside its first call: the compiler's refusal there is a
    build error (docs/pkb_corpus.md), with the compiler's message, not a runtime error of the call."""
    record = judge2.judge("all_reduce", """from pkb_env.runtime import compile_cubin

def solution(tensor):
    compile_cubin('extern "C" __global__ void k() { int x = }', backend="nvcc", arch="90")
    return tensor.clone()
""")
    assert record.verdict.value == "build_error", record.feedback
    assert "BUILD FAILED" in record.feedback and "expected an expression" in record.feedback, record.feedback


@needs_compilers
def test_closing_a_judge_mid_build_abandons_the_build_instead_of_waiting_for_it(tmp_path):
    """Closing a judge interrupts the step in progress; a step's build can be a minute from its answer (g++ on
    torch's headers), and closing waited for one (43 s on the 2-core machine; a benchmarks/pkb_corpus.py run was
    killed past its time limit so). Now no wait outlasts the interrupt and no build starts after it: the build
    never finishes (nothing cached) and nothing of it runs on."""
    import psutil

    from pkb_env.client import LocalClient

    name = f"stopprobe_{secrets.token_hex(4)}"
    code = (f"from pkb_env.runtime import load_inline\n"
            f"ext = load_inline({name!r}, cpp_sources='int probe() {{ return 1; }}', functions=['probe'])\n"
            f"def solution(tensor):\n    return tensor.clone()\n")

    def compiling() -> list:
        found = []
        for p in psutil.process_iter(["name", "cmdline"]):
            try:
                if p.info["name"] in ("cc1plus", "g++", "c++") and name in " ".join(p.info["cmdline"] or ()):
                    found.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    # two ranks: both ask for the build, the second behind the first (a second build started after the first
    # was killed, in a new zygote: what held the closing judge)
    client = LocalClient(FAST.replace(executor="cpu", world_size=2, cache_dir=str(tmp_path)))
    try:
        step = client.submit("all_reduce", code)
        for _ in range(2400):                    # until the compiler runs (two minutes at most)
            if compiling() or step.done():
                break
            threading.Event().wait(0.05)
        assert compiling(), "the step's build never reached the compiler"
    finally:
        client.close()
    assert list(tmp_path.glob(f"extensions/*/{name}.so")) == []   # abandoned, not finished and cached
    assert psutil.wait_procs(compiling(), timeout=10)[1] == []   # nothing of the build left running
