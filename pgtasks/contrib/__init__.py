"""Integrations of pgtasks with other frameworks (installed through extras)."""
