"""asv suites (see asv.conf.json at the repository root): the registry's workloads and what a
new process pays (import, first call with a warm cache, compile from an empty cache)."""
