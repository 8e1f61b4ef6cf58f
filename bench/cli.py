"""The ``bench`` command line: one subcommand per experiment, each in its own module.

A subcommand module exposes ``register(app)``, which adds its command to the typer app; adding
an experiment is one module plus one line in :data:`SUBCOMMANDS`.

Usage: ``bench layers --duration 5``; ``bench --help`` lists the experiments.
"""

from __future__ import annotations

import importlib

import typer

#: Modules under ``bench`` whose ``register(app)`` adds a subcommand.
SUBCOMMANDS = ("bench.layers_cli", "bench.conformance", "bench.profile", "bench.servers",
               "bench.concurrency", "bench.workers", "bench.load", "bench.h2",
               "bench.cluster", "bench.autobahn", "bench.download", "bench.ws")

app = typer.Typer(
    name="bench",
    help="Measure what each layer and server costs, with real servers and real load generators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Measure what each layer and server costs, with real servers and real load generators."""


for _module in SUBCOMMANDS:
    importlib.import_module(_module).register(app)


def main() -> None:
    """Entry point of the ``bench`` console script."""
    app()


if __name__ == "__main__":
    main()
