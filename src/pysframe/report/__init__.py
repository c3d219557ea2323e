"""Outputs: perf-script text (folded stacks, speedscope and flame graphs to come)."""
