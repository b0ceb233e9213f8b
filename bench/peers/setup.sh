#!/usr/bin/env bash
# Creates bench/peers/.venv: the peers (DBOS Transact, LangGraph and its savers) and a
# profiler, pinned, next to this project installed editable. The peers live here and
# only here: they are never dependencies of little-workflow (pyproject.toml does not
# name them), and the project's own .venv never sees them.
#
# Needs only the package registries pip is configured for. Re-running it is cheap: pip
# skips what is already installed at the pinned version.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3.11}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# Exact pins (why each: bench/peers/README.md). The project last, editable, so a pin
# above that clashes with its own requirements fails loudly here rather than at run time.
"$venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"
"$venv/bin/python" -m pip install --quiet -e "$repo"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version

for name in ("dbos", "langgraph", "langgraph-checkpoint-sqlite",
             "langgraph-checkpoint-postgres", "py-spy", "little-workflow"):
    print(f"{name}=={version(name)}")
PY
