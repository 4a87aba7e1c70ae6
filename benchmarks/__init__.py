"""pgtasks benchmarks: ``python3 dev.py bench`` (or ``python -m benchmarks``)."""
