"""The compile service's checks (pkb_env/judge/compile_checks.py), before any compiler starts: options are data
from an allowlist, includes never reach outside the candidate's own headers, comments and raw strings read as
a compiler reads them, and diagnostics keep only the candidate's own sources. That what is compiled runs
contained: tests/sandbox/test_compile_containment.py."""
import pytest

from pkb_env.judge.compile_checks import (CompileRefused, check_cuda_options, check_host_options, check_sources,
                                          diagnostics)
from pkb_env.sources import without_comments


# -- compiler options are data ----------------------------------------------------------------------
@pytest.mark.parametrize("options", [["@/etc/shadow"], ["--options-file", "/etc/shadow"], ["-optf", "x"],
                                     ["-I/root"], ["--include-path=/root"], ["-include", "/etc/shadow"],
                                     ["-o", "/tmp/x"], ["-keep"], ["-time", "t.csv"], ["--fdevice-time-trace=t"],
                                     ["--create-pch=x"], ["-L/root", "-lsecret"], ["-DX\"y"], ["-arch=sm_80"]])
def test_options_outside_the_allowlist_are_refused(options):
    for backend in ("nvcc", "nvrtc"):
        with pytest.raises(CompileRefused, match=r"refused \(.*\)\. Allowed: -O0"):
            check_cuda_options(options, backend, "90")


def test_options_on_the_allowlist_pass_normalised():
    assert check_cuda_options(["-O3", "--use_fast_math", "-DN=128", "-Xptxas", "-v", "-arch=sm_90a", "-lineinfo",
                               "--maxrregcount=64", "-std=c++20"], "nvcc", "90") == \
        ["-O3", "--use_fast_math", "-DN=128", "-Xptxas=-v", "-arch=sm_90a", "-lineinfo", "--maxrregcount=64",
         "-std=c++20"]
    assert check_host_options(["-O2", "-ffast-math", "-DUSE_X"]) == ["-O2", "-ffast-math", "-DUSE_X"]
    for bad in (["-fplugin=./p.so"], ["-specs=x"], ["-B/tmp"], ["-Wl,-T,x"], ["@opts"], ["-o", "x"]):
        with pytest.raises(CompileRefused):
            check_host_options(bad)


# -- includes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", [
    '#include "/etc/shadow"', '#include </etc/shadow>', '  #  include "../../../../etc/shadow"',
    '#include_next </etc/shadow>', '%:include "/etc/shadow"', '#inc\\\nlude "/etc/shadow"',
    '#/**/include "/etc/shadow"', '#define F "/etc/shadow"\n#include F', '#if __has_include("/etc/shadow")\n#endif',
    '#embed "/etc/shadow"', 'asm(".incbin \\"/etc/shadow\\"");',
    'const char* s = R"x(")/*)x";\n#include "/etc/shadow"\n// */'])
def test_includes_that_reach_outside_are_refused(source):
    with pytest.raises(CompileRefused, match="refused"):
        check_sources([("the CUDA source", source)])


def test_includes_of_headers_by_name_and_comments_pass():
    check_sources([("src", '#include <cuda_fp16.h>\n#include "mine.h"\n// #include "/etc/shadow"\n'
                           '/* #include </etc/shadow> */\nconst char* s = "#include </etc/shadow>";\n')])
    assert without_comments('a // b\nc /* d\ne */ f "g // h"') == 'a \nc \n f "g // h"'


@pytest.mark.parametrize("source, kept", [
    ('a = LR"(// kept)"; // gone', 'a = LR"(// kept)"; '),
    ('uR"x(/* kept )" still )x" /* gone */ y', 'uR"x(/* kept )" still )x"   y'),
    ('fooR"(// kept: an ordinary string)" z // gone', 'fooR"(// kept: an ordinary string)" z '),
    ("c = '\"'; // gone", "c = '\"'; "),
    ('R"delimiter_far_too_long(x)" // gone\nnext', 'R"delimiter_far_too_long(x)" \nnext'),
    ('u8R"(\n// kept\n)" /* a\nb */ end', 'u8R"(\n// kept\n)" \n end'),
])
def test_raw_strings_prefixes_and_quotes_keep_what_looks_like_a_comment(source, kept):
    """A raw string (with an encoding prefix, a delimiter) holds what looks like a comment; R" after a name
    starts an ordinary string; a delimiter over 16 characters makes no raw string; a quote in a character
    literal ends nothing."""
    assert without_comments(source) == kept


def test_diagnostics_keep_only_the_candidates_own_sources():
    log = ("/tmp/w/candidate.cu(3): error: identifier \"x\" is undefined\n  y = x;\n      ^\n"
           "/root/secret.h(1): error: this declaration has no storage class\n  password=hunter2-secret\n  ^\n"
           "In file included from /usr/include/stdio.h:27,\n                 from candidate.cu:1:\n"
           "/usr/include/bits/x.h:5:3: error: token\n    5 | secret line\n      |   ^\n"
           "nvcc -I/root/.local/include -c candidate.cu\n"
           "2 errors detected in the compilation of \"candidate.cu\".\n")
    text = diagnostics(log, {"candidate.cu"}, "/tmp/w")
    assert "candidate.cu(3): error" in text and "y = x;" in text and "2 errors detected" in text
    for leaked in ("hunter2", "secret", "/root", "/usr/include", "password"):
        assert leaked not in text, text
