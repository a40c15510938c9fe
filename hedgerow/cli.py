"""The one `hedgerow` entry point.

Subcommands live in the package that owns them and are imported only when chosen, so
`hedgerow gateway` never imports torch. Each command module provides `HELP` (one line),
`configure_parser(parser)` and `run(args) -> int`. Errors meant for the user (HedgerowError)
print one line and exit 2; nothing else is caught here.
"""

import argparse
import importlib
import sys

from hedgerow import __version__, lifeline
from hedgerow.errors import HedgerowError

COMMANDS = {
    "serve": ("hedgerow.commands.serve", "run the local stack: one server and the gateway"),
    "embed": ("hedgerow.commands.embed", "embed texts with a model and print JSON"),
    "guard": ("hedgerow.commands.guard", "record a golden set, or check a gateway against one"),
    "fetch-model": ("hedgerow.commands.fetch_model",
                    "fetch a Hugging Face model into a cache directory, verified"),
    "server": ("hedgerow.server.main", "run the gRPC embedding server (one per GPU)"),
    "gateway": ("hedgerow.gateway.main", "run the HTTP gateway in front of servers"),
    "operator": ("hedgerow.operator.main", "run the Kubernetes operator"),
    "bench": ("hedgerow.commands.bench", "run benchmarks and print a table"),
}


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hedgerow",
        description="Serve text-embedding models fast. Every flag (the benchmarks' aside) "
        "also reads an environment variable HEDGEROW_<FLAG_NAME>.",
    )
    parser.add_argument("--version", action="version", version=f"hedgerow {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        parser = _top_parser()
        if not argv:
            parser.print_help()
            return 2
        parser.parse_args(argv)  # prints --help/--version, or the unknown-command error
        return 2
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"hedgerow {name}", description=module.HELP)
    module.configure_parser(parser)
    args = parser.parse_args(rest)
    try:
        lifeline.follow_parent()
        return int(module.run(args) or 0)
    except HedgerowError as error:
        print(f"hedgerow {name}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
