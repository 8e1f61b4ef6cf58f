"""The registry holds every server's command line as data: checked for each entry here.

For every registered server: the argv it renders (address, workers, TLS, access log), what
it refuses, the protocols it declares (checked against the conformance suite's table of
gaps), and one real start with two worker processes.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import replace

import httpx
import psutil
import pytest

from bench.extra_servers import BARE_FILE
from bench.process import ServerProcess, free_port
from tests.conformance.support import UNSUPPORTED, unsupported_reason
from toyservers.registry import PROTOCOLS, SERVERS, Argv, available, get, register

HOST, PORT = "127.0.0.1", 9123
TLS = ("/certs/cert.pem", "/keys/key.pem")
APP = "apps.asgi_user:app"


def value_after(argv: list[str], flag: str) -> str:
    assert flag in argv, argv
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("name", list(SERVERS))
def test_argv_is_data_and_names_the_app_host_and_port(name: str) -> None:
    spec = SERVERS[name]
    assert isinstance(spec.argv, Argv)
    argv = spec.command(APP, HOST, PORT)
    assert all(isinstance(arg, str) and "{" not in arg for arg in argv), argv
    assert APP in argv
    text = " ".join(argv)
    assert HOST in text and str(PORT) in text
    if spec.kind == "baseline":
        assert argv[:3] == [sys.executable, str(BARE_FILE), APP]
    elif spec.argv.program == "{python}":  # a launcher of ours, run by this interpreter
        assert argv[0] == sys.executable
    else:
        assert argv[0].endswith(spec.argv.program)
    if spec.kind == "toy":
        assert value_after(argv, "--server") == (spec.variant_of or name)


@pytest.mark.parametrize("name", list(SERVERS))
def test_workers_are_honoured_or_refused_with_the_reason(name: str) -> None:
    spec = SERVERS[name]
    if spec.multiprocess:
        assert value_after(spec.command(APP, HOST, PORT), "--workers") == "1"
        assert value_after(spec.command(APP, HOST, PORT, workers=3), "--workers") == "3"
        assert spec.one_process is None
    else:
        assert "--workers" not in spec.command(APP, HOST, PORT)
        assert spec.one_process
        with pytest.raises(ValueError, match=f"{name} runs one process only"):
            spec.command(APP, HOST, PORT, workers=2)
    with pytest.raises(ValueError, match="workers must be 1 or more"):
        spec.command(APP, HOST, PORT, workers=0)


@pytest.mark.parametrize("name", list(SERVERS))
def test_threads_are_a_section_of_the_argv_or_refused(name: str) -> None:
    spec = SERVERS[name]
    plain = spec.command(APP, HOST, PORT)
    if spec.threaded:
        threaded = spec.command(APP, HOST, PORT, threads=7)
        assert threaded != plain and [p for p in threaded if p not in plain][-1].endswith("7")
        if spec.argv.tail:  # the app stays last where the server wants it last
            assert threaded[-1] == plain[-1] == APP
        if spec.threads is not None:  # a gthread variant: its own count unless asked
            assert plain == spec.command(APP, HOST, PORT, threads=spec.threads)
    else:
        with pytest.raises(ValueError, match=f"{name} takes no thread count"):
            spec.command(APP, HOST, PORT, threads=2)
    with pytest.raises(ValueError, match="threads must be 1 or more"):
        spec.command(APP, HOST, PORT, threads=0)


def test_the_wsgi_servers_and_their_thread_models() -> None:
    assert {n for n, s in SERVERS.items() if s.threaded} == {
        "toy-wsgi", "toy-wsgi-gthread", "gunicorn", "gunicorn-gthread", "waitress"}
    wsgi = {n for n, s in SERVERS.items() if s.interface == "wsgi"}
    assert wsgi == {"toy-wsgi", "toy-wsgi-gthread", "gunicorn", "gunicorn-gthread", "waitress",
                    "bjoern", "wsgiref"}
    for name in ("toy-wsgi", "gunicorn"):
        argv = SERVERS[name].command("apps.wsgi_user:app", HOST, PORT, threads=10)
        assert value_after(argv, "--worker-class") == "gthread"
        assert value_after(argv, "--threads") == "10"
        assert "--worker-class" not in SERVERS[name].command("apps.wsgi_user:app", HOST, PORT)
    assert SERVERS["waitress"].command("m:app", HOST, PORT, threads=3)[1:] == [
        f"--listen={HOST}:{PORT}", "--threads=3", "m:app"]
    assert SERVERS["bjoern"].command("m:app", HOST, PORT) == [
        sys.executable, "-m", "bench.bjoern_launcher", "m:app", "--host", HOST, "--port",
        str(PORT)]


def test_the_servers_with_a_workers_option() -> None:
    assert {n for n, s in SERVERS.items() if s.multiprocess} == {
        "uvicorn", "uvicorn-h11", "uvicorn-wsproto", "hypercorn", "granian", "gunicorn",
        "gunicorn-gthread", "toy-raw", "toy-h11", "toy-httptools", "toy-h2", "toy-wsgi",
        "toy-wsgi-gthread", "toy-anyio"}
    assert "daphne has no --workers" in str(SERVERS["daphne"].one_process)
    assert "workers run asyncio" in str(SERVERS["toy-anyio-trio"].one_process)


@pytest.mark.parametrize("name", list(SERVERS))
def test_tls_and_access_log_are_sections_of_the_argv(name: str) -> None:
    spec = SERVERS[name]
    plain = spec.command(APP, HOST, PORT)
    if spec.argv.listen_tls is None:
        with pytest.raises(ValueError, match=f"{name} does not serve HTTPS"):
            spec.command(APP, HOST, PORT, tls=TLS)
    else:
        secure = spec.command(APP, HOST, PORT, tls=TLS)
        text = " ".join(secure)
        assert all(path in text for path in TLS) and str(PORT) in text
        assert not any(path in " ".join(plain) for path in TLS)
    if spec.argv.access_log is None:
        with pytest.raises(ValueError, match=f"{name} writes no access log"):
            spec.command(APP, HOST, PORT, access_log=True)
    else:
        logged = spec.command(APP, HOST, PORT, access_log=True)
        assert logged != plain and set(spec.argv.access_log) <= set(logged)


def test_uvicorn_argv_in_full() -> None:
    argv = SERVERS["uvicorn"].command(APP, HOST, PORT, workers=2, access_log=True, tls=TLS)
    assert argv[1:] == [APP, "--host", HOST, "--port", str(PORT), "--ssl-certfile", TLS[0],
                        "--ssl-keyfile", TLS[1], "--http", "httptools", "--loop", "uvloop",
                        "--log-level", "warning", "--access-log", "--workers", "2"]


def test_the_app_comes_last_where_the_server_wants_it_last() -> None:
    for name in ("hypercorn", "daphne", "granian", "gunicorn"):
        assert SERVERS[name].command(APP, HOST, PORT, access_log=True)[-1] == APP, name


def test_a_variant_is_its_program_with_other_options() -> None:
    """Other options: another argv (uvicorn-h11) or a thread count of its own (gthread)."""
    for name, spec in SERVERS.items():
        if spec.variant_of is not None:
            base = SERVERS[spec.variant_of]
            assert (base.kind, base.interface, base.package, base.module) == (
                spec.kind, spec.interface, spec.package, spec.module), name
            assert spec.argv.program == base.argv.program, name
            assert spec.command(APP, HOST, PORT) != base.command(APP, HOST, PORT), name
    assert value_after(SERVERS["toy-wsgi-gthread"].command(APP, HOST, PORT),
                       "--worker-class") == "gthread"
    assert value_after(SERVERS["gunicorn-gthread"].command(APP, HOST, PORT),
                       "--worker-class") == "gthread"


def test_the_wsgi_servers() -> None:
    assert available(interface="wsgi") == ["toy-wsgi", "toy-wsgi-gthread", "gunicorn",
                                           "gunicorn-gthread", "waitress", "wsgiref"]
    assert "bjoern" not in available(interface="wsgi")  # an optional extra: only when named
    bjoern = ["bjoern"] if importlib.util.find_spec("bjoern") else []
    assert available(["bjoern"], interface="wsgi") == bjoern
    wsgiref = get("wsgiref")
    assert wsgiref.command(APP, HOST, PORT)[1:4] == ["-m", "bench.wsgiref_server", APP]
    assert wsgiref.version() == sys.version.split()[0]


def test_daphne_tls_escapes_its_endpoint_string() -> None:
    argv = SERVERS["daphne"].command(APP, "::1", 8443, tls=("/a:b/c.pem", "/k\\ey.pem"))
    assert value_after(argv, "-e") == ("ssl:8443:interface=\\:\\:1:privateKey=/k\\\\ey.pem:"
                                       "certKey=/a\\:b/c.pem")
    assert "-b" not in argv and "-p" not in argv


@pytest.mark.parametrize("name", list(SERVERS))
def test_protocols_are_declared_from_the_known_set(name: str) -> None:
    protocols = SERVERS[name].protocols
    assert "http/1.1" in protocols and protocols <= PROTOCOLS


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_protocols_agree_with_the_conformance_suite(name: str) -> None:
    """WebSocket and h2c are tested by the suite; a declared gap means no such protocol."""
    gaps, protocols = UNSUPPORTED[name], SERVERS[name].protocols
    assert ("websocket" in protocols) == ("websocket" not in gaps)
    # A gap declared by hand must agree with the registry; where none is declared the suite
    # takes the registry's word (support.H2_FEATURES).
    if "h2c-prior-knowledge" in gaps:
        assert "h2c" not in protocols
    if "h2c" not in protocols:
        assert unsupported_reason(name, "h2c-prior-knowledge") is not None


def test_the_baseline_is_registered_but_never_offered_by_default() -> None:
    bare = get("bare")
    assert (bare.kind, bare.interface, bare.module) == ("baseline", "asgi", None)
    assert BARE_FILE.is_file()
    assert "bare" not in available()
    assert available(kinds=("baseline",)) == ["bare"]
    with pytest.raises(ValueError, match="bare is a baseline server"):
        bare.load()


def test_toyservers_alone_names_nothing_of_bench_or_the_lessons() -> None:
    """Dependencies point one way: the registry imported without ``bench`` has the toy and
    reference servers, and none of its argvs runs a ``bench`` module or a lesson file."""
    script = ("import sys, toyservers.registry as r\n"
              "argvs = [' '.join(s.command('m:app', 'h', 1)) for s in r.SERVERS.values()]\n"
              "print(sorted(r.SERVERS)); print(any(m.startswith('bench') for m in sys.modules))\n"
              "print([a for a in argvs if ' bench.' in a or '/lessons/' in a])")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    alone = set(eval(out[0]))  # a list literal printed by the child
    assert {"toy-h11", "uvicorn", "waitress"} <= alone
    assert alone.isdisjoint({"bjoern", "wsgiref", "bare"})
    assert out[1:] == ["False", "[]"]


def test_bench_adds_its_servers_after_the_others_and_only_once() -> None:
    names = list(SERVERS)
    assert names[-3:] == ["bjoern", "wsgiref", "bare"]
    assert register(SERVERS["bare"]) is SERVERS["bare"]  # the same spec again: no change
    assert list(SERVERS) == names
    with pytest.raises(ValueError, match="'bare' is already registered"):
        register(replace(SERVERS["bare"], description="another"))
    assert SERVERS["bare"].description.startswith("baseline:")


def test_two_workers_really_start_two_processes() -> None:
    port = free_port()
    argv = SERVERS["uvicorn"].command(APP, HOST, port, workers=2)
    with ServerProcess(argv, port=port, startup_timeout=30) as server:
        answer = httpx.post(server.url, content=b'{"id": 1, "name": "a", "email": "b"}',
                            timeout=10)
        assert answer.status_code == 200
        children = psutil.Process(server.pid).children(recursive=True)
        workers = [c for c in children if "spawn_main" in " ".join(c.cmdline())]
        assert len(workers) == 2, [c.cmdline() for c in children]
