"""Exercise 12, a plausible wrong answer: Little's law alone, as if threads were cores.

Requests in flight over the time each takes is the first limit, and the only one here: no
limit for the cores. It predicts gevent and the event loops climbing with every connection
added, when a process computes on one core at a time (the GIL) and no more processes compute
than there are cores. ``EXERCISE_IMPL=wrong make exercise N=12`` shows what a student who
wrote it reads; ``tests/test_exercises.py`` checks that it fails with this hint:

Fails: test_predict[gevent-4w-100c-2cores]: AssertionError: gevent, 4 worker(s), 100
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
    per_worker = {"sync": 1.0, "gthread": float(threads)}.get(model, float("inf"))
    in_flight = min(float(connections), workers * per_worker)
    return in_flight / (cpu_s + wait_s)
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
