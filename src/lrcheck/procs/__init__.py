"""Processes, below both ``runner`` and ``record``: which are alive, and what a process lrcheck
started does when lrcheck itself is gone (``procs.owner``). Imports none of lrcheck's other
packages."""
