"""bench: start servers, drive load generators against them, report what each layer costs.

Importing the package adds the servers only ``bench`` can start (a launcher of its own, a
lesson file) to the registry: :mod:`bench.extra_servers`.
"""

from bench import extra_servers as extra_servers
