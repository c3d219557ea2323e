"""Outputs of unwound samples: :mod:`.perf_script` (the text of ``perf script
--no-inline``) and :mod:`.profiles` (folded stacks, speedscope JSON, SVG flame graphs).

Nothing is exported at the package level: those two modules are the API.
"""

__all__: list[str] = []
