"""The stack tracer: an address space of modules, SFrame rules, frame-pointer fallback."""
