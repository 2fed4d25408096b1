"""The task contract (pkb_env/contract/): its parts one by one, and the example specs of
tests/contract_v3_tasks/ judged end to end (inputs: meshes, sparse inputs, routing; outputs: in-place state,
complex values, variable lengths, rows keyed by ids)."""
