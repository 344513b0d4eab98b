"""asv suites (see asv.conf.json at the repository root): the workloads W1-W5 and what a
new process pays (import, first call with a warm cache, compile from an empty cache)."""
