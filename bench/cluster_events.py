"""``bench cluster``'s scenarios under load: balancing, failover, and a rolling restart.

Each scenario is a list of rows (a proxy and a variant), measured in interleaved rounds as
everywhere in ``bench`` (round ``r`` runs every row once, in an order rotated each round);
what each run does to the cluster while wrk loads it:

- **balance** (:func:`balance_run`): requests per backend under round robin and
  least-connections. The backends serve on, and each is asked ``GET /count`` before and after
  the run; backend ``b1`` waits ``slow_ms`` per request, so the two algorithms differ: round
  robin gives it its third of the requests whatever it takes, least-connections gives it only
  as many as it answers.
- **failover** (:func:`failover_run`): halfway through the run, SIGKILL backend ``b1``; the
  failed requests are wrk's errors (5xx answers, resets, timeouts), counted for GET and POST
  apart: what ``b1`` had in flight is lost, and a proxy may pass a lost GET to another backend
  but not a POST.
- **rolling** (:func:`rolling_run`): every backend in turn is stopped gracefully and started
  again on its port, the way a deploy does, under POST load; the target is 0 failed requests.
  ``how`` is how the proxy is told: ``sigterm`` (nginx: nothing; the backend's own graceful
  shutdown and nginx's retry of a refused connection), ``reload`` (nginx: a config with the
  backend ``down``, then SIGHUP, before the SIGTERM, and back after), ``drain`` (HAProxy:
  ``state drain`` through the runtime API until it has no request in progress, then SIGTERM;
  ``state ready`` after, and the active health check says when it is UP),
  ``idle-close-on-response`` (as ``sigterm``, to backends run with
  ``--idle-close-on-response``: their idle keep-alive connections stay open after SIGTERM
  for one more answer, with ``Connection: close``, or until the proxy's shorter idle timeout
  closes them, so the proxy never sends a request on a connection being closed).

Each scenario has one fleet for all its rows (the failover rows' killed b1 is started again
before the next run; the ``idle-close-on-response`` rows have a fleet of their own, started
with the option: :data:`BACKEND_OPTIONS`); the failover and rolling runs start a fresh proxy
each (one that marked a backend failed carries nothing over), the balance rows keep theirs up
for all rounds. wrk runs in the background (:class:`BackgroundWrk`) while the bench acts,
and is stopped with SIGINT where the scenario decides the length.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from bench.cluster_stack import Fleet, Proxy, Upstream, wait_until
from bench.harness import check_echo
from bench.loadgen import Load, LoadGenError, RunSummary
from bench.rounds import Progress
from bench.wrk import LUA_DIR, POST_JSON, WrkError, parse_summary, wrk_command

Method = Literal["GET", "POST"]
RollingHow = Literal["sigterm", "reload", "drain", "idle-close-on-response"]
#: The backends' extra command-line options for a rolling restart's ``how`` (none for the rest).
BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {
    "idle-close-on-response": ("--idle-close-on-response",)}
GET_SCRIPT = LUA_DIR / "get.lua"
#: Seconds of load before the first backend is touched, and after the last is back.
LEAD_S = 1.0
#: Longest a rolling restart's wrk may run, seconds (a stuck restart ends the run).
ROLLING_CAP_S = 600


# --- wrk in the background ---------------------------------------------------------------------


class BackgroundWrk:
    """wrk loading ``url`` while the bench does something to the cluster.

    ``with BackgroundWrk(...) as load: ...; summary = load.finish()``: :meth:`finish` waits
    for the end of wrk's ``--duration`` and reads the summary; :meth:`interrupt` first sends
    SIGINT (wrk then stops, prints its report and calls the script's ``done()`` as at the end
    of a timed run).
    """

    def __init__(self, wrk: str, url: str, load: Load, method: Method, cpu: int | None) -> None:
        self.load, self.cpu = load, cpu
        script = GET_SCRIPT if method == "GET" else POST_JSON
        self.command = wrk_command(wrk, url, connections=load.connections,
                                   threads=load.threads, duration=load.duration, script=script,
                                   cpu=cpu, timeout=load.timeout)
        handle, name = tempfile.mkstemp(prefix="wrk-", suffix=".json")
        os.close(handle)
        self.summary_path = Path(name)
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0.0

    def __enter__(self) -> BackgroundWrk:
        env = {**os.environ, "BENCH_WRK_JSON": str(self.summary_path),
               "BENCH_WRK_BODY": self.load.body.decode()}
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self.started = time.monotonic()
        return self

    def elapsed(self) -> float:
        """Seconds since wrk started."""
        return time.monotonic() - self.started

    def interrupt(self) -> RunSummary:
        """Stop wrk now (SIGINT) and return its summary (see :meth:`finish`)."""
        assert self.proc is not None, "interrupt before start"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.finish()

    def finish(self, grace: float = 30.0) -> RunSummary:
        """Wait for wrk's end and return its summary.

        Raises:
            WrkError: wrk failed, ran ``grace`` seconds past its duration, or wrote no summary.
        """
        assert self.proc is not None, "finish before start"
        try:
            output, _ = self.proc.communicate(timeout=self.load.duration + grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise WrkError(f"wrk ran {grace:g} s past its duration and was stopped") from None
        if self.proc.returncode != 0:
            raise WrkError(f"wrk exited with status {self.proc.returncode}: {output[-500:]}")
        text = self.summary_path.read_text()
        if not text.strip():
            raise WrkError(f"wrk wrote no summary: {output[-500:]}")
        return parse_summary(text)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.summary_path.unlink(missing_ok=True)


# --- what a run needs ----------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """Where and how the scenarios run: shared by every row.

    Attributes:
        wrk: the wrk executable.
        load: the load of one run (``duration``: the run's seconds; a rolling restart's run
            lasts as long as the restart, plus :data:`LEAD_S` before and after).
        server: the backends' registry server.
        backends: how many.
        host: the address everything listens on.
        wrk_cpu, proxy_cpu: their CPUs, or None.
        backend_cpus: the backends' CPUs, backend ``i`` on ``backend_cpus[i % len]``.
        logs: the folder of every process's output.
        proxy_folder: where each proxy's config folder is made.
        wait_ms: what each failover and rolling-restart request waits in the app, ms.
        slow_ms: what backend b1 waits per request in the balance rows, ms.
    """

    wrk: str
    load: Load
    server: str
    backends: int
    host: str
    wrk_cpu: int | None
    proxy_cpu: int | None
    backend_cpus: tuple[int | None, ...]
    logs: Path
    proxy_folder: Path
    wait_ms: float
    slow_ms: float

    def fleet(self, prefix: str, wait_ms: Callable[[int], float], count: int | None = None,
              options: tuple[str, ...] = ()) -> Fleet:
        """``count`` backends (default :attr:`backends`) as :meth:`Fleet.plan` places them,
        each run with ``options`` on its command line."""
        return Fleet.plan(count or self.backends, self.server, self.host, self.backend_cpus,
                          self.logs, prefix, wait_ms, options)

    def proxy(self, name: str, path: str, label: str, fleet: Fleet, upstream: Upstream
              ) -> Proxy:
        folder = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.proxy_folder))
        return Proxy(name, path, folder, fleet.addresses, upstream, self.host)


@contextmanager
def proxied(stage: Stage, fleet: Fleet, proxy: Proxy, label: str) -> Iterator[str]:
    """``proxy`` running in front of ``fleet`` (whose stopped or killed backends are started
    again first), one POST answered through it; yields its URL and stops it on the way out.

    Raises:
        RuntimeError: the check request through the proxy failed (the message says how).
        bench.process.ServerStartError, TimeoutError: a process did not start.
    """
    fleet.start()
    try:
        proxy.start(stage.proxy_cpu, stage.logs / f"{label}.log")
        problem = check_echo(stage.host, proxy.port)
        if problem is not None:
            raise RuntimeError(f"check through {proxy.name}: {problem}")
        yield f"http://{stage.host}:{proxy.port}/"
    finally:
        proxy.stop()


def failed_of(summary: RunSummary) -> int:
    """The run's failed requests: every error wrk counted (5xx and 4xx answers, connections
    refused or reset, timeouts)."""
    return summary.error_total


# --- the scenarios -----------------------------------------------------------------------------


def balance_run(stage: Stage, fleet: Fleet, url: str, round_index: int) -> dict[str, Any]:
    """One balance run against ``url`` (a proxy in front of the running ``fleet``): wrk for
    ``stage.load.duration`` seconds, and each backend's requests over it."""
    before = fleet.counts()
    with BackgroundWrk(stage.wrk, url, stage.load, "POST", stage.wrk_cpu) as load:
        summary = load.finish()
    after = fleet.counts()
    counts = {name: (after[name] or 0) - (before[name] or 0) for name in before}
    return {"round": round_index, "command": load.command, "summary": summary.to_json(),
            "per_backend": counts}


def failover_run(stage: Stage, fleet: Fleet, make_proxy: Callable[[Fleet], Proxy],
                 method: Method, label: str, round_index: int) -> dict[str, Any]:
    """One failover run: ``fleet`` whole again behind a fresh proxy, wrk ``method`` for
    ``stage.load.duration`` s, and b1 SIGKILLed halfway."""
    with proxied(stage, fleet, make_proxy(fleet), f"{label}-r{round_index + 1}") as url:
        before = fleet.counts()
        with BackgroundWrk(stage.wrk, url, stage.load, method, stage.wrk_cpu) as load:
            time.sleep(stage.load.duration / 2)  # the scenario's timing: the kill comes halfway
            killed_at = load.elapsed()
            fleet["b1"].kill()
            summary = load.finish()
        after = fleet.counts()
    survivors = {name: (after[name] or 0) - (before[name] or 0) for name in before
                 if name != "b1"}
    return {"round": round_index, "command": load.command, "summary": summary.to_json(),
            "failed": failed_of(summary), "killed": "b1", "killed_at_s": killed_at,
            "per_backend": survivors}


def restart_one(proxy: Proxy, fleet: Fleet, name: str, how: RollingHow, settle: float
                ) -> dict[str, float]:
    """Stop backend ``name`` gracefully and start it again, telling ``proxy`` as ``how`` says
    (module docstring); seconds each step took."""
    backend, steps, started = fleet[name], {}, time.monotonic()

    def lap(step: str) -> None:
        nonlocal started
        now = time.monotonic()
        steps[step], started = now - started, now

    if how == "reload":
        proxy.reload(replace(proxy.upstream, down=proxy.upstream.down | {name}))
        lap("drain_s")
    elif how == "drain":
        proxy.api(f"set server backends/{name} state drain")
        wait_until(lambda: proxy.server_stats()[name]["scur"] == "0", 30,
                   f"HAProxy to finish {name}'s requests")
        lap("drain_s")
    backend.terminate()
    lap("stop_s")
    backend.start()
    lap("start_s")
    if how == "reload":
        proxy.reload(replace(proxy.upstream, down=proxy.upstream.down - {name}))
    elif how == "drain":
        proxy.api(f"set server backends/{name} state ready")
        wait_until(lambda: proxy.server_stats()[name]["status"] == "UP", 30,
                   f"HAProxy's health check to find {name} UP")
    else:
        time.sleep(settle)  # nginx's fail_timeout: until it sends b1 requests again
    lap("back_s")
    return steps


def rolling_run(stage: Stage, fleet: Fleet, make_proxy: Callable[[Fleet], Proxy],
                how: RollingHow, label: str, round_index: int) -> dict[str, Any]:
    """One rolling restart under POST load: ``fleet`` behind a fresh proxy; after
    :data:`LEAD_S` s every backend in turn (:func:`restart_one`), then :data:`LEAD_S` s
    more."""
    proxy = make_proxy(fleet)
    load_spec = replace(stage.load, duration=ROLLING_CAP_S)
    with proxied(stage, fleet, proxy, f"{label}-r{round_index + 1}") as url, \
            BackgroundWrk(stage.wrk, url, load_spec, "POST", stage.wrk_cpu) as load:
        time.sleep(LEAD_S)  # load before the first restart, as in a deploy under traffic
        steps = {b.name: restart_one(proxy, fleet, b.name, how, proxy.upstream.fail_timeout)
                 for b in fleet.backends}
        time.sleep(LEAD_S)
        summary = load.interrupt()
    return {"round": round_index, "command": load.command, "summary": summary.to_json(),
            "failed": failed_of(summary), "steps": steps}


def guarded(run: Callable[[], dict[str, Any]], progress: Progress, what: str
            ) -> dict[str, Any]:
    """``run()``, or ``{"error": ...}`` when it failed; one progress step either way."""
    progress.update(what)
    try:
        return run()
    except (LoadGenError, RuntimeError, OSError, TimeoutError) as exc:
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    finally:
        progress.advance()
