"""Exercise 12, starter: predict the ``bench workers`` table before running it.

Each request of ``bench workers`` spends ``cpu_s`` seconds of CPU (fib(25)) and then waits
``wait_s`` seconds on the upstream (0.150). ``predict(model, ...)`` returns the requests per
second first principles allow, from two limits:

- **in flight**: a server has at most ``S`` requests in flight, where ``S`` is the smaller of
  ``connections`` (wrk's closed loop: one request per connection at a time) and what the
  workers can hold: ``workers`` times 1 for ``"sync"``, times ``threads`` for ``"gthread"``,
  unbounded for ``"gevent"`` and ``"async"``. Each takes at least ``cpu_s + wait_s``, so
  RPS <= S / (cpu_s + wait_s) (Little's law);
- **cores**: a worker process runs Python on one core at a time (the GIL), so at most
  ``K = min(workers, cores)`` cores compute, and RPS <= K / cpu_s.

The prediction is the smaller of the two.

YOUR TASK: write the body of ``predict`` below (look for "EXERCISE"). Check your work with
``make exercise N=12``; its last test recomputes the predicted column of the lesson's
committed results file. Then run it:
``.venv/bin/python lessons/exercises/12-blocking-and-workers/starter.py`` prints your
prediction beside each measured row.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


# --8<-- [start:exercise]
def predict(model: str, *, workers: int, threads: int, connections: int, cpu_s: float,
            wait_s: float, cores: int) -> float:
    """Predicted requests per second for ``model`` (``"sync"``, ``"gthread"``, ``"gevent"``
    or ``"async"``); ``cpu_s`` and ``wait_s`` in seconds, ``threads`` per gthread worker."""
    # ---- EXERCISE: replace the line below with your code. ----------------------------------
    # Hints: float("inf") stands for "unbounded"; min() of the two limits.
    raise NotImplementedError("exercise 12: write predict()")
# --8<-- [end:exercise]


def main(path: str) -> None:
    """Print each row's measured RPS beside ``predict``'s, from a bench workers results.json."""
    data = json.loads(Path(path).read_text())
    p, s = data["prediction"], data["settings"]
    for row in data["rows"]:
        guess = predict(row["model"], workers=row["workers"], threads=s["worker_threads"],
                        connections=row["connections"], cpu_s=p["cpu_s"], wait_s=p["wait_s"],
                        cores=p["cores"])
        measured = row["rps_median"]
        shown = "–" if measured is None else f"{measured:.1f}"
        print(f"{row['row']:<18} c={row['connections']:<4} measured {shown:>6}  "
              f"predicted {guess:6.1f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lessons/results/workers/results.json")
