"""`python3 -m nabla ARGS` (and the `nabla` command a pip install adds) runs
the nabla command-line program that came with this package, with ARGS; its
exit status is the status. See docs/cli.md."""
import os
import sys


def _binary():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [
        os.path.join(here, "bin", "nabla"),  # pip install: inside the package
        os.path.join(here, "..", "..", "bin", "nabla"),  # the build tree: build/python/nabla
        os.path.join(here, "..", "..", "..", "..", "bin", "nabla"),  # <prefix>/lib/python3.X/dist-packages/nabla
    ]
    for path in candidates:
        if os.access(path, os.X_OK):
            return os.path.normpath(path)
    sys.exit("nabla: the nabla program is not beside this package (looked in: " + ", ".join(
        os.path.normpath(c) for c in candidates) + ")")


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    binary = _binary()
    sys.stdout.flush()
    sys.stderr.flush()
    # exec: the program's exit status, signals and terminal are the caller's.
    os.execv(binary, [binary] + args)


if __name__ == "__main__":
    main()
