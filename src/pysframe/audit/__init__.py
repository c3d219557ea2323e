"""``sframe audit``: what SFrame covers in a set of files, how right it is, what it costs."""
