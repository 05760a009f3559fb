"""Imported last by the forkserver of Dagster's multiprocess executor (``definitions.PRELOAD``): every step process
of a run the UI or the sensor launches is forked from it, so the collector's settings of processes that run many
steps (``gc_settings``) are set there once, after the preload. Frozen in the server, what the preload loaded is
never walked by a step's collections, and those collections no longer write into the pages the step shares with
the server (copy-on-write), as the Python documentation of ``gc.freeze`` advises for processes that fork."""

from ehrxqa_pipeline import gc_settings

gc_settings.for_many_steps()
