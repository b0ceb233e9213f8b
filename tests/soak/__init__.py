"""Soak runs, on demand only: ``python -m tests.soak`` (see ``__main__``)."""
