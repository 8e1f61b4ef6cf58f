"""Lesson 1, step 1: echo bytes. A TCP server that sends back whatever it receives.

Run: ``.venv/bin/python lessons/code/01-bytes/step1_echo.py 8000``, then point any client at it. It
knows nothing about HTTP: what comes back is exactly what your client sent, which is the point. A
browser or curl sends an HTTP request; this server shows you those bytes.

Deliberately left out: everything HTTP. That is the next four steps.
"""

from __future__ import annotations

import asyncio
import sys


# --8<-- [start:echo]
async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Send every chunk the client sends straight back, until the client closes its side."""
    print(f"connection from {writer.get_extra_info('peername')}", flush=True)
    try:
        while data := await reader.read(65536):  # b"" means the client closed: end the loop
            print(f"received {len(data)} bytes: {data!r}", flush=True)
            writer.write(data)
            await writer.drain()  # wait while the kernel's send buffer is full
    except ConnectionError:
        pass
    finally:
        writer.close()
# --8<-- [end:echo]


# --8<-- [start:main]
async def main(port: int) -> None:
    """Listen on 127.0.0.1:``port`` and run ``handle`` once per connection, concurrently."""
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8000))
    except KeyboardInterrupt:
        pass
# --8<-- [end:main]
