"""Workflows and step functions for the command-line tests (``tests/cli``)."""
