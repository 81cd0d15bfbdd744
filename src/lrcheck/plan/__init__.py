"""The pure arithmetic of a run: its data order, its step plan and ``ScheduleContext``, and the
scheduler-stepping policies. Imported by ``spec`` and ``runner``, importing neither; no torch."""
