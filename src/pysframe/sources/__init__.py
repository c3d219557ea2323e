"""Sources of stacks: :mod:`.perf_data` (perf.data recordings), :mod:`.live` (a running
process through ptrace) and :mod:`.core` (core dumps).

Nothing is exported at the package level: those three modules are the API.
"""

__all__: list[str] = []
