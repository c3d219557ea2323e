"""The stack tracer: an address space of modules, SFrame rules, frame-pointer fallback.

``address_space`` is the data model (modules, mappings, the address space) later stages
read; ``modules`` loads binaries and their tables into it; ``memory`` is what the tracer
reads the stack through (``StackReader``); ``plans`` are the cached per-pc decisions of
``unwinder``, the tracer; ``perf_session`` feeds it the samples of a perf.data recording.
"""

__all__: list[str] = []
