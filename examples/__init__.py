"""Examples to copy: a review pipeline, an orchestrator, an outer loop (see README.md)."""
