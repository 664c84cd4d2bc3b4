"""Builds the optional C accelerator (client/_speedups.c); everything else is declared in pyproject.toml.

``optional=True``: where it cannot be compiled (no C compiler, an unsupported platform) the install goes on without
it, and ringtrace runs its pure-Python recorder.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ringtrace.client._speedups", ["client/_speedups.c"], optional=True)])
