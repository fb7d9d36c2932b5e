"""``devmem exporter``: the command's flags and handler; the exporter itself is :mod:`devmem.exporter`."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from devmem.platform import Platform
from devmem.types import DevmemError

SUMMARY = "serve device memory, processes, reservations and doctor's findings to Prometheus"
DESCRIPTION = (
    "Serves /metrics in Prometheus' text format: per device its total, free and used bytes; each process's "
    "device memory (PID, user, command, container and cgroup); each reservation's reserved and used bytes, "
    "over-commitment and stale entries; doctor's findings as gauges. Every scrape reads each device once, in "
    "parallel, and waits at most --deadline seconds: a device that fails or hangs is left out of that scrape "
    "and counted in devmem_exporter_reading_failures_total. No client can stall it: each connection has "
    "--client-timeout to send its request and again to take its answer, at most --max-connections are open, and "
    "the requests waiting share one reading. Listens on 127.0.0.1 unless --listen says "
    "otherwise, and only reads (the reservation ledger is never written, locked or created). Needs "
    "prometheus-client: pip install prometheus-client (from a devmem checkout, pip install -e '.[exporter]'). "
    "docs/exporter.md lists every metric."
)
EXAMPLES = (
    "  devmem exporter                          # http://127.0.0.1:9633/metrics\n"
    "  devmem exporter --listen 0.0.0.0:9633    # reachable from other hosts (a Prometheus server)\n"
    "  curl -s 127.0.0.1:9633/metrics | grep devmem_reservation"
)
EXIT_CODES = (
    "exit codes:\n  0  stopped by SIGTERM or Ctrl-C\n  1  an error devmem explains in one line "
    "(prometheus-client missing, the address in use)\n  2  a usage error"
)


def _bounded_number(what: str, low: float, high: float, kind: Callable[[str], float]) -> Callable[[str], float]:
    from devmem._text import parse_decimal, parse_int, shown

    def parse(text: str) -> float:
        # ASCII only: int() and float() also read full-width and other Unicode digits, and underscores
        value = parse_int(text) if kind is int else parse_decimal(text)
        if value is None:
            value = float("nan")
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a {what}: give a number from {low:g} to {high:g}")
        return value

    return parse


def _listen(text: str) -> str:
    from devmem.exporter.server import parse_listen

    try:
        parse_listen(text)
    except DevmemError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_exporter_flags(parser: argparse.ArgumentParser) -> None:
    """The exporter's flags on its sub-command's ``parser``."""
    from devmem.exporter.server import DEFAULT_CLIENT_TIMEOUT, DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS

    parser.add_argument(
        "--listen",
        type=_listen,
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN}: this host only; 0.0.0.0:PORT for every interface)",
    )
    parser.add_argument(
        "--deadline",
        type=_bounded_number("deadline in seconds", 0.01, 600, float),
        default=5.0,
        metavar="SECONDS",
        help="the longest a scrape waits for the devices' readings (default 5; keep it below Prometheus' "
        "scrape_timeout)",
    )
    parser.add_argument(
        "--max-processes",
        type=_bounded_number("process count", 1, 10000, int),
        default=32,
        metavar="N",
        help="processes (and reservation holders) per device shown one by one; the rest are counted (default 32)",
    )
    parser.add_argument(
        "--command-length",
        type=_bounded_number("command length", 16, 4096, int),
        default=64,
        metavar="N",
        help="characters of a command line kept in its label (default 64)",
    )
    parser.add_argument(
        "--max-connections",
        type=_bounded_number("connection count", 1, 65536, int),
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help=f"connections open at once (default {DEFAULT_MAX_CONNECTIONS}, fewer where the descriptor limit is "
        "lower); one more closes the oldest that is not waiting for its answer",
    )
    parser.add_argument(
        "--client-timeout",
        type=_bounded_number("client timeout in seconds", 0.1, 600, float),
        default=DEFAULT_CLIENT_TIMEOUT,
        metavar="SECONDS",
        help=f"the longest a client may take to send its request, and again to take its answer, before it is "
        f"closed (default {DEFAULT_CLIENT_TIMEOUT:g})",
    )
    parser.set_defaults(handler=cmd_exporter)


def cmd_exporter(args: argparse.Namespace, platform: Platform | None = None) -> int:
    """Serve the metrics of ``platform`` (the resolved one by default) until SIGTERM or Ctrl-C."""
    from devmem.command.output import error_line
    from devmem.engine.reservations import default_directory
    from devmem.exporter.server import prometheus_client, run
    from devmem.resolution.plugins import current_platform

    prometheus_client()  # what to install, before anything is read
    from devmem.exporter.metrics import DevmemCollector
    from devmem.exporter.readings import NodeReader

    reader = NodeReader(
        platform or current_platform(),
        default_directory(),
        deadline=args.deadline,
        max_processes=int(args.max_processes),
        command_length=int(args.command_length),
    )
    return run(
        DevmemCollector(reader),
        args.listen,
        error_line,
        max_connections=int(args.max_connections),
        client_timeout=args.client_timeout,
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``devmem exporter`` and its flags."""
    from devmem.command.common import add_command

    add_exporter_flags(add_command(sub, "exporter", SUMMARY, DESCRIPTION, EXAMPLES, EXIT_CODES))
