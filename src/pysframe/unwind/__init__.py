"""The stack tracer: :mod:`.modules` (an address space of mapped ELF files and their
SFrame tables), :mod:`.unwinder` (one frame at a time, SFrame first, frame pointers as
fallback) and :mod:`.perf_session` (the samples of a perf.data recording).

Nothing is exported at the package level: those modules are the API.
"""

__all__: list[str] = []
