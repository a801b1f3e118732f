"""Intermediary that starts a stack part fully detached (the classic double fork).

``python -m handoff.stack._detach LOG CWD -- CMD...`` starts CMD in a new
session with its output appended to LOG, prints its pid and exits at once.
The part is then the child of init, not of the caller: a long-lived caller
(a test session, the demo) neither collects zombies nor holds a ``Popen``
object whose collection warns that the child still runs. Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main(argv: list[str]) -> None:
    log, cwd, separator, *cmd = argv
    if separator != "--" or not cmd:
        sys.exit("usage: python -m handoff.stack._detach LOG CWD -- CMD...")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
        )
    sys.stdout.write(f"{proc.pid}\n")
    sys.stdout.flush()
    os._exit(0)  # leave without finalising the Popen of a child that keeps running


if __name__ == "__main__":
    main(sys.argv[1:])
