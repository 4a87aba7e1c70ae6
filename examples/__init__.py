"""Runnable examples: ``python3 dev.py demo`` runs :mod:`examples.demo`."""
