"""A shim for tools that still call setup.py: every bit of metadata is in pyproject.toml."""
from setuptools import setup

setup()
