"""Deterministic simulation of the local host: one seed drives every chance.

``python -m flowcore_local.sim run SEED`` runs one seed; ``sweep`` runs many
over several processes; ``shrink SEED`` looks for a shorter schedule that
still fails. See specs/testing.md, "Deterministic simulation of the local host".
"""
