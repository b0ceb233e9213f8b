"""little-workflow measured side by side with DBOS Transact, LangGraph and raw SQL.

Run ``python -m bench.peers`` (see ``__main__`` and ``bench/peers/README.md``).
"""
