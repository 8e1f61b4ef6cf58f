"""The app of ``bench load``: ``GET /api/v2/<msisdn>`` on Flask, answering JSON.

An MSISDN is a phone number in international form (ITU-T E.164: a country code and a
subscriber number, at most 15 digits). The view checks the number and answers what it can
tell from it without a database, so the experiment measures the server and Flask, not a
backend:

``{"msisdn": "4915112345678", "country_code": "49", "country": "DE", "valid": true}``

A number that is not 8 to 15 digits gets ``400`` with ``{"error": ...}``; a country code
outside the small table gets ``valid: false`` and ``country: null``.

Two forms of the same app: ``app`` (WSGI, for gunicorn, bjoern, toy-wsgi) and ``asgi_app``
(the WSGI app behind a2wsgi's ``WSGIMiddleware``, for uvicorn: each request runs the Flask
view in a thread pool and the response is streamed back to the event loop).

Run it: ``gunicorn apps.load_app:app`` or ``uvicorn apps.load_app:asgi_app``.
"""

from __future__ import annotations

from a2wsgi import WSGIMiddleware
from flask import Flask, jsonify
from flask.typing import ResponseReturnValue

#: The request path ``bench load`` sends (a German mobile number).
SAMPLE_PATH = "/api/v2/4915112345678"

#: Country calling codes (ITU-T E.164 annex) the view recognises, longest first.
COUNTRY_CODES = {"351": "PT", "353": "IE", "358": "FI", "49": "DE", "44": "GB", "33": "FR",
                 "34": "ES", "39": "IT", "31": "NL", "46": "SE", "1": "US", "7": "RU"}

app = Flask(__name__)


# --8<-- [start:view]
@app.get("/api/v2/<msisdn>")
def lookup(msisdn: str) -> ResponseReturnValue:
    """What the number says about itself, or 400 when it is not 8 to 15 digits."""
    if not (msisdn.isascii() and msisdn.isdigit() and 8 <= len(msisdn) <= 15):
        return jsonify(error="an MSISDN is 8 to 15 digits (E.164)"), 400
    code = next((c for c in sorted(COUNTRY_CODES, key=len, reverse=True)
                 if msisdn.startswith(c)), None)
    return jsonify(msisdn=msisdn, country_code=code,
                   country=COUNTRY_CODES.get(code or ""), valid=code is not None)
# --8<-- [end:view]


#: The same app for an ASGI server, through a2wsgi (a maintained WSGI-to-ASGI adapter).
asgi_app = WSGIMiddleware(app)  # type: ignore[arg-type]
