"""Where code runs (pkb_env/executors/): capacity, candidate faults, and the tests that must reach under the
service (injected start failures, spies on timed work), each saying why only the executor's internals can
show what it checks."""
