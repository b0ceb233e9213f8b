"""One measurement in a fresh process: ``python -m bench.peers._child '<job json>'``.

Imports the system's module (its import time is reported: it is part of a resume),
runs the job, and prints one JSON line. A ``kill`` job's first phase never prints: the
step at ``kill_at`` SIGKILLs this process from inside its own body.
"""

from __future__ import annotations

import importlib
import json
import sys
import time


def main() -> None:
    from bench.peers._common import Job

    job = Job.from_json(sys.argv[1])
    start = time.perf_counter()
    module = importlib.import_module(f"bench.peers._{job.system}")
    import_s = time.perf_counter() - start
    result = module.run(job)
    result["import_s"] = import_s
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
