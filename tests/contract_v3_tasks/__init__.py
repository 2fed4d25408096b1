"""Example specs of contract v3, judged end to end on CPU ranks (docs/task_contract.md, "Example specs outside the
suite").

Not part of the suite (no suite task used these features when they were written): each is addressed by its
dotted import path, `contract_v3_tasks.<name>` (pkb_env/task.py), with this folder's parent on the judge's
PYTHONPATH (tests/conftest.py, `examples_importable`). `pkb-env tasks`, `docs/tasks.md` and the suite's
golden test never see them.

| spec | proves | tests |
|---|---|---|
| expert_groups | a mesh sized by a preset dim; groups over one and over two of its dimensions | contract/test_meshes_sparse_routing.py |
| routed_dispatch | top-k routing drawn jointly over an expert group; the cost of the realised routing | contract/test_meshes_sparse_routing.py |
| sparse_gather_matmul | a sparse input, in float32 or float64 | contract/test_meshes_sparse_routing.py |
| adam_step | InPlace state (Adam's param and moments), identical replicas, a Python float, a tuple slot that is always None, a dict output on a set of ranks (OnRanks) with an integer count | contract/test_output_kinds.py |
| rfft | a complex output of the task dtype compared on both parts at the Fft rule | contract/test_output_kinds.py |
| dispatch | variable-length outputs with a bound (max_shape), float rows in any order keyed by an id output (order_by), integer indices with a stated tie rule | contract/test_output_kinds.py |
"""
