"""toyservers: minimal ASGI servers written from scratch, to read beside uvicorn and friends.

``SERVERS`` maps every server name (ours and the reference ones) to how to start it; see
``toyservers.registry``. Each of our servers is one module with ``serve()`` and ``run()``.
"""

from toyservers.config import Config
from toyservers.registry import SERVERS, ServerSpec

__all__ = ["SERVERS", "Config", "ServerSpec"]
__version__ = "0.1.0"
