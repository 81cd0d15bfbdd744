"""Real trainers run for real: one small adapter per framework, which builds the framework's
objects for a ``RunSpec``, attaches the ``Recording`` and runs (``accelerate.py`` is the shape
the others copy)."""
