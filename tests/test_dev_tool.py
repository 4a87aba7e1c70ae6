"""dev.py's test environment: the Python processes of a test run cache their bytecode."""

from __future__ import annotations

from pathlib import Path

import pytest

import dev


def test_a_run_without_bytecode_writing_gets_a_cache_outside_the_sources(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)

    dev.cache_bytecode(tmp_path)

    assert "PYTHONDONTWRITEBYTECODE" not in dev.venv_env(tmp_path)
    assert dev.venv_env(tmp_path)["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pycache")


def test_the_callers_cache_prefix_and_default_are_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/somewhere/else")
    dev.cache_bytecode(tmp_path)
    assert dev.venv_env(tmp_path)["PYTHONDONTWRITEBYTECODE"] == "1"
    assert dev.venv_env(tmp_path)["PYTHONPYCACHEPREFIX"] == "/somewhere/else"

    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX")
    dev.cache_bytecode(tmp_path)  # bytecode written beside the sources, as Python does
    assert "PYTHONPYCACHEPREFIX" not in dev.venv_env(tmp_path)
