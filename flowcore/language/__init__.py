"""The flow language: a spec read into a model (``spec``, ``model``, ``hooks``,
``converter``, ``refs``, ``positions``), JMESPath templates (``expr``), input
schemas (``validate``), metadata, durations and cron (``times``), what steps
read and reference, lint, the static budget bound, schedules and diagrams.

It never imports the decision function or the tools over it.
"""
