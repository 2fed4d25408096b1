"""ParallelKernelBench (PKB) compatibility (docs/pkb_compat.md): a PKB-format file judged unchanged.

    adapter.py   the trusted wrapper a rank puts around a PKB file's `solution` (the task's `Pkb` declaration)
    helpers/     PKB's `utils.*` helpers as thin shims over pkb_env.runtime, importable as `utils` in a --pkb rank
    files.py     PKB's file names (`12_allgather_gemm_cuda.py`) to tasks, by PKB id and name
"""
