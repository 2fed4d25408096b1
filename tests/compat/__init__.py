"""PKB compatibility (pkb_env/compat/, contract/pkb.py, judge/pkb.py; docs/pkb_compat.md): PKB-format files judged
unchanged through each task's declared mapping, PKB's helpers in the rank, the file names, and the `pkb` variants
stating PKB's problem as PKB states it against their goldens."""
