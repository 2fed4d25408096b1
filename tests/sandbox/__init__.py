"""Containment (pkb_env/sandbox/): namespaces, the allowlisted root, file access, isolation, the freezer,
compiles that run contained, and the answer key out of reach."""
