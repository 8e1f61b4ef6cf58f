"""What the app gets: the environ's keys and values, and the ``wsgi.input`` stream.

Spec: PEP 3333 ("environ Variables", "input and error streams", "Unicode Issues", "Other HTTP
Features": chunked input and ``wsgi.input_terminated``); RFC 9110 §5.3 (repeated fields).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance_wsgi import support
from tests.conformance_wsgi.support import Connection, get, request
from tests.support.running import RunningServer

feature = pytest.mark.feature

REQUIRED = ("REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "SERVER_NAME",
            "SERVER_PORT", "SERVER_PROTOCOL")
BODY = b"line one\nline two\nthree"  # 23 bytes, three "lines"


def environ(port: int, target: str = "/environ", *, version: str = "HTTP/1.1",
            headers: list[tuple[str, str]] | None = None, body: bytes = b"") -> dict[str, Any]:
    with Connection(port) as conn:
        method = "POST" if body else "GET"
        conn.send(request(method, target, version=version, headers=headers, body=body))
        response = conn.read_response()
    assert response is not None and response.complete and response.status == 200, response
    value = response.json()
    assert isinstance(value, dict)
    return value


@feature("environ-keys")
def test_required_keys_have_the_required_types(server: RunningServer) -> None:
    env = environ(server.port)
    for key in REQUIRED:
        assert isinstance(env.get(key), str), f"{key} missing or not a str"
    assert env["REQUEST_METHOD"] == "GET"
    assert env["SERVER_PORT"] == str(server.port)
    assert env["wsgi.version"] == [1, 0]
    assert env["wsgi.url_scheme"] == "http"
    assert set(env["input-methods"]) == {"read", "readline", "readlines", "__iter__"}


@feature("environ-keys")
@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
def test_server_protocol_is_the_request_version(server: RunningServer, version: str) -> None:
    assert environ(server.port, version=version)["SERVER_PROTOCOL"] == version


@feature("environ-keys")
def test_remote_addr_is_the_client(server: RunningServer) -> None:
    env = environ(server.port)
    assert env.get("REMOTE_ADDR") == support.HOST


@feature("path-info")
def test_path_info_is_percent_decoded_as_latin1(server: RunningServer) -> None:
    # PEP 3333: "native strings" hold bytes 0-255 as code points 0-255; the UTF-8 of "é" is
    # two bytes, so two code points.
    env = environ(server.port, "/environ/caf%C3%A9%20x/%41")
    assert env["SCRIPT_NAME"] == ""
    assert env["PATH_INFO"] == "/environ/caf\u00c3\u00a9 x/A"


@feature("query-string")
def test_query_string_is_passed_undecoded(server: RunningServer) -> None:
    env = environ(server.port, "/environ?a=1&b=%20x&c=%C3%A9&a=2")
    assert env["QUERY_STRING"] == "a=1&b=%20x&c=%C3%A9&a=2"
    assert environ(server.port)["QUERY_STRING"] == ""


@feature("content-headers")
def test_content_type_and_length_have_no_http_prefix(server: RunningServer) -> None:
    env = environ(server.port, headers=[("Content-Type", "text/x-conformance")], body=b"abc")
    assert env["CONTENT_TYPE"] == "text/x-conformance"
    assert env["CONTENT_LENGTH"] == "3"
    assert "HTTP_CONTENT_TYPE" not in env and "HTTP_CONTENT_LENGTH" not in env


@feature("http-headers")
def test_header_fields_become_http_keys(server: RunningServer) -> None:
    env = environ(server.port, headers=[("X-Conformance-Name", "Value with spaces"),
                                        ("Accept", "text/plain")])
    assert env["HTTP_X_CONFORMANCE_NAME"] == "Value with spaces"
    assert env["HTTP_ACCEPT"] == "text/plain"
    assert env["HTTP_HOST"] == support.HOST


@feature("http-headers")
def test_repeated_fields_are_joined_in_order(server: RunningServer) -> None:
    # RFC 9110 §5.3: a recipient MAY combine repeated field lines "in order, separated by a
    # comma (",") and optional whitespace": toy-wsgi and waitress join with ", ", gunicorn
    # and wsgiref with ",", and both are the same list.
    env = environ(server.port, headers=[("X-Repeat", "one"), ("X-Repeat", "two"),
                                        ("X-Repeat", "three")])
    assert [part.strip(" ") for part in env["HTTP_X_REPEAT"].split(",")] == ["one", "two",
                                                                              "three"]


@feature("wsgi-flags")
def test_multithread_multiprocess_run_once(server: RunningServer) -> None:
    env = environ(server.port)
    flags = [env.get(f"wsgi.{name}") for name in ("multithread", "multiprocess", "run_once")]
    assert all(isinstance(flag, bool) for flag in flags), flags
    assert env["wsgi.run_once"] is False, "a long-running server says run_once False"
    if server.name in support.THREADED:
        assert env["wsgi.multithread"] is True, "the app runs in several threads at once"


def read_pieces(port: int, how: str, body: bytes = BODY) -> list[str]:
    """The pieces ``/read?how=`` got. The client keeps the connection open: a read that waits
    for EOF times out here (in 2 s), and the close frees the server."""
    with Connection(port, timeout=2.0) as conn:
        conn.send(request("POST", f"/read?how={how}", body=body))
        response = conn.read_response()
    assert response is not None and response.complete and response.status == 200, response
    value = response.json()
    assert isinstance(value, dict)
    return list(value["pieces"])


@feature("input-read")
def test_read_with_a_size(server: RunningServer) -> None:
    pieces = read_pieces(server.port, "read-n")
    assert "".join(pieces) == BODY.decode()
    assert all(len(piece) <= 5 for piece in pieces)


@feature("input-read")
def test_readline_with_and_without_a_size(server: RunningServer) -> None:
    assert read_pieces(server.port, "readline") == ["line one\n", "lin", "e two\n"]


@feature("input-to-end")
def test_read_without_a_size_ends_at_the_body(server: RunningServer) -> None:
    # PEP 3333: "A server should allow read() to be called without an argument, and return
    # the entire remainder of the client's input stream", and "should simulate an end-of-file
    # condition if the application attempts to read past" the Content-Length.
    assert read_pieces(server.port, "read-all") == [BODY.decode()]


@feature("input-to-end")
def test_readlines_and_iteration_end_at_the_body(server: RunningServer) -> None:
    lines = ["line one\n", "line two\n", "three"]
    assert read_pieces(server.port, "readlines") == lines
    assert read_pieces(server.port, "iter") == lines


@feature("input-bounded")
def test_input_never_reads_past_the_body(server: RunningServer) -> None:
    # The next request comes in the same segment: the app must see only its own body, and a
    # server that keeps the connection must answer the next request intact.
    with Connection(server.port) as conn:
        conn.send(request("POST", "/echo", body=b"abc") + request("GET", "/environ?next=1"))
        first = conn.read_response()
        assert first is not None and first.status == 200
        assert first.json() == {"body": "abc"}
        if (first.header("connection") or "").lower() == "close" or first.version == "HTTP/1.0":
            return  # one request per connection: nothing more to check
        second = conn.read_response()
    assert second is not None and second.status == 200
    assert second.json()["QUERY_STRING"] == "next=1"


@feature("chunked-request")
def test_chunked_body_is_decoded_and_terminated(server: RunningServer) -> None:
    chunked = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    with Connection(server.port, timeout=3.0) as conn:
        conn.send(request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")],
                          body=chunked))
        response = conn.read_response()
    assert response is not None and response.status == 200
    assert response.json() == {"body": "hello world"}
    env = environ(server.port, headers=[("Transfer-Encoding", "chunked")],
                  body=b"3\r\nabc\r\n0\r\n\r\n")
    assert env.get("wsgi.input_terminated") is True


@feature("errors-stream")
def test_wsgi_errors_is_a_writable_text_stream(server: RunningServer) -> None:
    env = environ(server.port)
    assert set(env["errors-methods"]) == {"write", "writelines", "flush"}
    response = get(server.port, "/errors")
    assert response.status == 200 and response.json() == {"wrote": True}
