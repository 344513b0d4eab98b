"""The ``fastbptt`` program's entry point: its console script and ``python -m fastbptt``.

`main` imports the command line itself, so that a Ctrl-C while it loads (argparse, the
signal guards: about 12 ms) ends as one inside a command does, in one line and status
130, not in a traceback. Only Python's own start-up and ``import fastbptt`` (about 1 ms:
the package loads its names on first use) come before it.
"""
import sys


def main():
    """The program's exit status (`fastbptt.cli.main` on the program's arguments)."""
    try:
        from .cli import main as command
    except KeyboardInterrupt:
        if sys.stderr is not None:
            print("fastbptt: interrupted by SIGINT", file=sys.stderr)
        return 130
    return command()
