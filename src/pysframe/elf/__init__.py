"""ELF container: locating .sframe sections and applying their relocations."""
