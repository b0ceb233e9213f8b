"""``python -m little_workflow`` is the ``little-workflow`` command."""

from __future__ import annotations

from little_workflow.cli import main

if __name__ == "__main__":
    main()
