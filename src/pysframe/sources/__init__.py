"""Sources of stacks: perf.data recordings (live processes and core dumps to come)."""
