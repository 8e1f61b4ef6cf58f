"""wrk sending ``GET <path>``, with an optional bearer token: the load of ``bench servers``
and ``bench load``.

:class:`WrkGet` is a :class:`bench.loadgen.LoadGenerator` like :class:`bench.wrk.Wrk`, with
the same summary (``bench/lua/get_bearer.lua`` reuses ``post_json.lua``'s ``done()`` hook);
it differs in what it sends: the harness hands it the server's root URL, and it loads
``path`` under it. The token goes on wrk's command line after the URL, where wrk passes it
to the script's ``init(args)``, so the recorded command is the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.loadgen import Load, RunSummary, ToolMissing
from bench.wrk import LUA_DIR, MISSING, find_wrk, run_wrk, wrk_command, wrk_version

GET_BEARER = LUA_DIR / "get_bearer.lua"


@dataclass(frozen=True)
class WrkGet:
    """wrk loading ``GET path`` (with ``Authorization: Bearer token`` when ``token`` is set).

    Attributes:
        path: the wrk executable.
        request_path: the path to load, e.g. ``"/api/shortbody"``.
        token: the bearer token, or ``""`` for none.
        name: ``"wrk"``.
    """

    path: str
    request_path: str = "/"
    token: str = ""
    name: str = "wrk"

    @classmethod
    def find(cls, request_path: str = "/", token: str = "") -> WrkGet:
        """wrk from PATH, loading ``request_path``.

        Raises:
            ToolMissing: wrk is not installed (:data:`bench.wrk.MISSING`).
        """
        found = find_wrk()
        if found is None:
            raise ToolMissing(MISSING)
        return cls(found, request_path, token)

    def version(self) -> str:
        """wrk's version, e.g. ``"4.1.0"``."""
        return wrk_version(self.path)

    def url(self, root: str) -> str:
        """``root`` (``http://host:port/``) with :attr:`request_path` in place of ``/``."""
        return root.rstrip("/") + self.request_path

    def command(self, url: str, load: Load, *, cpu: int | None = None) -> list[str]:
        """The exact argv of one run against ``url``'s server (see
        :func:`bench.wrk.wrk_command`), the token last."""
        argv = wrk_command(self.path, self.url(url), connections=load.connections,
                           threads=load.threads, duration=load.duration, script=GET_BEARER,
                           cpu=cpu, timeout=load.timeout)
        return [*argv, self.token] if self.token else argv

    def run(self, url: str, load: Load, *, cpu: int | None = None) -> RunSummary:
        """Run wrk; :class:`bench.wrk.WrkError` when it fails (see :func:`bench.wrk.run_wrk`)."""
        return run_wrk(self.command(url, load, cpu=cpu), body=b"", cpu=cpu)
