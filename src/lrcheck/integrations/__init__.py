"""Callbacks for one's own training runs in a framework (``transformers.LrcheckCallback``,
``lightning.LrcheckCallback``): each writes a Recorder line per optimizer update for
``lrcheck diff``. ``lrcheck compare --framework`` records through the same callbacks
(``core.Tap``), into its ``Recording`` instead of a file."""
