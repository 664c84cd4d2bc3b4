"""The one place the ringtrace version is written (pyproject.toml reads it from here)."""

__version__ = "0.1.0"
