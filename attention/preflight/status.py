"""The statuses of a preflight check, shared by every check (deployment, memory, the Ray fleet)."""

PASS, WARN, FAIL = "pass", "warn", "fail"
STATUSES = (PASS, WARN, FAIL)  # in rising severity: the worst of several checks is the one with the highest index
