"""Hostile and broken HTTP/1.1 input, sent as raw bytes to every server (issue 3).

``corpus.py`` holds the cases as data with their sources, ``wire.py`` the raw-socket client
and response reader, ``launch.py`` runs a toy server with short deadlines, and
``test_hostile.py`` runs it all against toy-raw, toy-h11, toy-httptools, toy-anyio,
toy-anyio-trio and uvicorn, and toy-wsgi and gunicorn (WSGI, with the same echo as a WSGI app).
"""
