"""Symbols: function names for addresses, the way perf names them."""
