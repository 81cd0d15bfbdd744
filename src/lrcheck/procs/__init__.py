"""Processes, below both ``runner`` and ``record``: which are alive, and what a process lrcheck
started does when lrcheck itself is gone (``procs.owner``); the processes of one launch found
by their marker and stopped (``procs.marks``); ``--deterministic`` applied in a process and read
back (``procs.determinism``). Imports only ``spec.determinism``'s declarations of lrcheck's
other packages."""
