"""The sandbox: where untrusted code is held (docs/containment.md).

Fork servers (the zygote, one cell per rank set or build), namespaces and the allowlisted root filesystem
a cell builds, the scrubbed environment variables, privileges dropped for good, resource limits, and
the build cell's process. Both ends of each fork server live in one module: the judge's handle and the
server it talks to.
"""
