"""tests/ludwig/ trains through Ludwig, which lives in its own environment (``make
venv-ludwig``; ``make test-ludwig`` runs these there). ``tests/conftest.py`` leaves this folder
out of a run in an environment without Ludwig, so nothing here is ever skipped: it runs for real
or is not collected."""
