"""JIT code: growable SFrame sections (:mod:`.growable`) for code a runtime writes at run
time."""

from .growable import GrowableSection, SectionFull

__all__ = ["GrowableSection", "SectionFull"]
