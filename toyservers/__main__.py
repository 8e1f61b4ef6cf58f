"""``python -m toyservers`` is the ``toyserve`` CLI."""

from toyservers.cli import main

main()
