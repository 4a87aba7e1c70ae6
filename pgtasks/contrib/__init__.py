"""Integrations of pgtasks with other frameworks, each importable on its own (optional
extras where they need packages of their own)."""
