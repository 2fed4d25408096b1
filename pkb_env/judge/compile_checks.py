"""What a candidate may ask the compile service for, checked as data before any compiler runs.

A candidate's compile request is candidate code too (docs/containment.md): its options are checked
against an allowlist per compiler, its sources for includes that reach outside them, and the compiler's
messages that go back to it are cut to its own sources. The allowlisted root of the build cell is the
wall (a file that is not there cannot be read); these checks are what make a refusal clear and early:

* options: only those that change code rank set (optimisation, fast math, defines, the language
  standard, this GPU's architecture, register limits, ptxas verbosity). Never: choosing the host
  compiler (-ccbin), passing options through to it or the linker (-Xcompiler, -Xlinker, plugins, specs),
  include or library paths, pre-included files, response files (@file, --options-file), anything that
  writes files (output names, kept intermediates, timing and PCH files);
* sources: `#include`, `#include_next`, `#import`, `#embed` and `__has_include` only of literal header
  names, never absolute and never with "..": the toolkit's headers by name, and the candidate's own;
  no `.incbin` (an assembler directive that reads a file into the binary); nothing that asks for NVLink
  multicast (pkb_env/sources.py: multimem PTX, cuMulticast*, multicast pointers, NVLS switches, driver symbol
  lookups), whoever assembled the source: this is the line behind the static screen for text built at run time;
* diagnostics: blocks of compiler output located in a file other than the candidate's own sources, and
  lines naming a path outside them, are dropped; what remains is capped to the first errors.
"""
from __future__ import annotations

import re

from pkb_env.sources import MULTICAST_FIX, multicast_use, without_comments

MAX_LOG_CHARS = 3000
MAX_LOG_LINES = 30
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
MACRO_VALUE = r"[^\s\"'\\@]*"   # no spaces, quotes, backslashes or response files
PTXAS_ALLOWED = re.compile(r"-v|--verbose|-O[0-3]|--warn-on-spills|--warn-on-local-memory-usage|"
                           r"--warn-on-double-precision-use|-dlcm=(ca|cg|cs)|-dscm=(cg|cs|wt)")
CUDA_COMMON = [r"-D" + IDENTIFIER + r"(=" + MACRO_VALUE + r")?", r"-U" + IDENTIFIER, r"--?std=c\+\+(11|14|17|20)",
               r"--?(ftz|prec-div|prec-sqrt|fmad)=(true|false)", r"--?use_fast_math", r"-lineinfo",
               r"--generate-line-info", r"-G", r"--device-debug", r"--?maxrregcount=\d{1,3}", r"--?restrict",
               r"-w", r"--disable-warnings", r"--?extended-lambda", r"--?expt-extended-lambda",
               r"--?expt-relaxed-constexpr", r"-O[0-3]", r"--?dopt=(on|off)"]
NVCC_ONLY = [r"--resource-usage", r"-res-usage", r"--?default-stream=(legacy|null|per-thread)",
             r"-Wno-deprecated-gpu-targets", r"--?source-in-ptx", r"-src-in-ptx"]
NVRTC_ONLY = [r"-default-device", r"--device-as-default-execution-space", r"--?device-int128", r"--?minimal",
              r"--?extra-device-vectorization", r"--?fdevice-syntax-only"]
HOST_ALLOWED = [r"-O[0-3s]", r"-Ofast", r"-g", r"-D" + IDENTIFIER + r"(=" + MACRO_VALUE + r")?", r"-U" + IDENTIFIER,
                r"-std=(c|gnu)\+\+(14|17|20)", r"-ffast-math", r"-funroll-loops", r"-fno-strict-aliasing",
                r"-march=native", r"-mtune=native", r"-w", r"-Wall", r"-Wextra", r"-Wno-[a-z-]+"]
# Options that take their value as the next argument: joined into one (`-Xptxas -v` -> `-Xptxas=-v`).
TAKES_VALUE = {"-Xptxas", "--ptxas-options", "-arch", "--gpu-architecture", "-maxrregcount", "--maxrregcount",
               "-std", "--std", "-D", "-U", "-default-stream", "--default-stream"}
WHY_REFUSED = [
    (r"(-ccbin|--compiler-bindir)\b.*", "chooses the host compiler, so a program of the candidate's would run"),
    (r"(-Xcompiler|--compiler-options|-Xlinker|--linker-options|-Xnvlink|--nvlink-options|-Xarchive|"
     r"--archive-options|-Wl,|-Wa,|-Wp,|-fplugin|-specs|-B|-wrapper).*", "passes options through to another tool"),
    (r"(-I|--include-path|-isystem|--system-include|-iquote|-idirafter|-imacros|-include|--pre-include|"
     r"--sysroot).*", "reaches headers outside the toolkit and the candidate's own sources"),
    (r"(-L|--library-path|--library).*|-l[\w.+-]+", "links libraries of the candidate's choosing"),
    (r"(@|--options-file|-optf).*", "reads options from a file (a response file)"),
    (r"(-o|--output-file|-odir|--output-directory|-keep|--keep|-keep-dir|--keep-dir|-save-temps|-MF|-MD|-MMD|"
     r"--dependency-output|-M|--generate-dependencies|-fdump|--dump).*", "writes files"),
    (r"(-time|--time|--fdevice-time-trace|-ftime-trace).*", "writes timing files"),
    (r"(--pch|-pch|--create-pch|--use-pch|--pch-dir|--instantiate-templates-in-pch).*", "uses precompiled header files"),
]
DIRECTIVE = re.compile(r"^\s*(?:#|%:|\?\?=)\s*(include_next|include|import|embed)\b(.*)$")
HAS_INCLUDE = re.compile(r"__has_include(?:_next)?\s*\(([^)]*)\)")
HEADER = re.compile(r'\s*(?:<([^<>"\n]+)>|"([^"\n]+)")\s*')
INCBIN = re.compile(r"\.incbin\b", re.IGNORECASE)
LOCATION = re.compile(r"^(?P<path>[^\s:()\"']+?)(?:\(\d+\)|:\d+(?::\d+)?):")
# An absolute path of two components or more: at the start, after a space, quote, bracket, '=' or ':', or
# glued to a one-letter option (-I/usr/include); "a/b/c" (relative) and "x / y" (division) do not count.
OUTSIDE_PATH = re.compile(r"(?:^|(?<=[\s\"'=(<:,])|(?<=-[A-Za-z]))/(?:[\w.+-]+/)+[\w.+-]+")


class CompileRefused(ValueError):
    """A request the compile service will not run; the message names what and what is allowed instead."""


def check_cuda_options(options: list[str], backend: str, arch: str | None) -> list[str]:
    """The options of a CUDA compile (nvcc or NVRTC), normalised, or CompileRefused naming the first bad one.

    arch: the GPU's architecture ("90"): -arch may only name it (or its a/f variants); None: any.
    """
    allowed = CUDA_COMMON + (NVCC_ONLY if backend == "nvcc" else NVRTC_ONLY)
    number = re.escape(arch) if arch else r"\d+"
    arch = arch or "<arch>"
    allowed += [rf"(-arch|--gpu-architecture)=(sm_{number}[af]?|compute_{number}[af]?)",
                r"(-Xptxas|--ptxas-options)=(" + PTXAS_ALLOWED.pattern + r")(,(" + PTXAS_ALLOWED.pattern + r"))*"]
    summary = (f"-O0..-O3, -D<NAME>[=<value>], -U<NAME>, -std=c++11..20, --use_fast_math, -ftz/-prec-div/"
               f"-prec-sqrt/-fmad=true|false, -lineinfo, -G, --maxrregcount=<n>, -arch=sm_{arch}[a|f], "
               f"-Xptxas=-v|-O<n>|--warn-on-spills|..., --restrict, --extended-lambda, --expt-relaxed-constexpr, "
               f"-w" + (", --resource-usage, --default-stream=..." if backend == "nvcc" else
                        ", -default-device, --device-int128, --minimal"))
    return _check(options, allowed, f"{backend} option", summary)


def check_host_options(options: list[str]) -> list[str]:
    """Host-compiler options of a torch extension build (extra_cflags)."""
    summary = "-O0..-O3, -Ofast, -g, -D<NAME>[=<value>], -U<NAME>, -std=c++14..20, -ffast-math, -funroll-loops, " \
              "-march=native, -w, -Wall, -Wextra, -Wno-<warning>"
    return _check(options, HOST_ALLOWED, "host compiler option", summary)


def _check(options: list[str], allowed: list[str], what: str, summary: str) -> list[str]:
    if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
        raise CompileRefused(f"{what}s must be a list of strings, got {options!r}")
    joined, i = [], 0
    while i < len(options):
        option = options[i]
        if option in TAKES_VALUE and i + 1 < len(options):
            option = option + ("" if option in ("-D", "-U") else "=") + options[i + 1]
            i += 1
        joined.append(option)
        i += 1
    for option in joined:
        if not any(re.fullmatch(pattern, option) for pattern in allowed):
            why = next((reason for pattern, reason in WHY_REFUSED if re.fullmatch(pattern, option)),
                       "not on the allowlist")
            raise CompileRefused(f"{what} {option!r} refused ({why}). Allowed: {summary}. Headers: the toolkit's "
                                 f"by name (#include <cuda_fp16.h>) and your own sources; paths cannot be passed.")
    return joined


def check_sources(sources: list[tuple[str, str]]) -> None:
    """Every `#include` (and the like) of every (label, source) names a header literally, inside the sources;
    no source asks for NVLink multicast."""
    for label, source in sources:
        if not isinstance(source, str):
            raise CompileRefused(f"{label} must be a string of source code, got {type(source).__name__}")
        text = without_comments(source.replace("\\\r\n", "").replace("\\\n", ""))
        if INCBIN.search(text):
            raise CompileRefused(f"{label}: `.incbin` refused (it reads a file into the binary at compile time)")
        multicast = multicast_use(text)
        if multicast:
            raise CompileRefused(f"{label}: {multicast[0]} refused (`{multicast[1]}`). {MULTICAST_FIX}.")
        for line in text.splitlines():
            match = DIRECTIVE.match(line)
            if match:
                _check_header(match.group(2), f"#{match.group(1)}", label, line)
            for operand in HAS_INCLUDE.findall(line):
                _check_header(operand, "__has_include", label, line)


def _check_header(operand: str, directive: str, label: str, line: str) -> None:
    header = HEADER.fullmatch(operand)
    if header is None:
        raise CompileRefused(f"{label}: `{line.strip()}` refused: {directive} must name a header literally "
                             f"(<name> or \"name\"), not through a macro")
    name = header.group(1) or header.group(2)
    if name.startswith("/") or "\\" in name or ".." in name.split("/"):
        raise CompileRefused(f"{label}: `{line.strip()}` refused: headers are the toolkit's, by name "
                             f"(#include <cuda_fp16.h>), or your own sources; absolute paths and '..' are not allowed")


def diagnostics(log: str, own: set[str], workdir: str) -> str:
    """The compiler's messages about the candidate's own sources, capped; nothing quoting another file.

    own: the candidate's source files as messages name them once `workdir` is cut from their paths.
    A message block (a located line and the indented lines quoting code under it) located in any other
    file is dropped whole; so is every line that names a path outside the sources.
    """
    kept, keep = [], True
    for line in log.replace(workdir.rstrip("/") + "/", "").splitlines():
        if not line.strip():
            continue
        located = LOCATION.match(line)
        if located:
            keep = located.group("path") in own
        elif not line[:1].isspace() and not line.startswith("|"):
            keep = True  # a message of its own ("1 error detected ..."): kept unless it names an outside path
        if keep and not OUTSIDE_PATH.search(line):
            kept.append(line)
    errors = [i for i, line in enumerate(kept) if "error" in line.lower()]
    start = max(0, errors[0] - 2) if errors else 0
    text = "\n".join(kept[start:start + MAX_LOG_LINES])[:MAX_LOG_CHARS]
    return text or "the compiler's messages concern files outside your sources (not shown); check your #includes"
