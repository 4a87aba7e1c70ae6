"""Integrations with other frameworks, each importable on its own (optional extras)."""
