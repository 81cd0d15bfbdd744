"""lrcheck's version, in a module of its own so that any module can name it without importing
the package's public API (which imports ``api``, which imports the runner)."""

__version__ = "0.1.0"
