"""Intermediary that starts a stack part fully detached (the classic double fork).

``python -m handoff.stack._detach LOG CWD [USER] -- CMD...`` starts CMD in a
new session with its output appended to LOG (as USER, when given: Patroni
runs PostgreSQL, which refuses root), prints its pid and exits at once.
The part is then the child of init, not of the caller: a long-lived caller
(a test session, the demo) neither collects zombies nor holds a ``Popen``
object whose collection warns that the child still runs. Standard library only.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys


def main(argv: list[str]) -> None:
    log, cwd, *rest = argv
    user = rest.pop(0) if rest and rest[0] != "--" else None
    if not rest or rest[0] != "--" or len(rest) < 2:
        sys.exit("usage: python -m handoff.stack._detach LOG CWD [USER] -- CMD...")
    cmd = rest[1:]
    # uid, gid and no supplementary groups: root's groups left in place would open
    # whatever a root-owned folder's group bits allow.
    who = pwd.getpwnam(user) if user else None
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
            user=who.pw_uid if who else None,
            group=who.pw_gid if who else None,
            extra_groups=[] if who else None,
            env={**os.environ, "HOME": who.pw_dir} if who else None,
        )
    sys.stdout.write(f"{proc.pid}\n")
    sys.stdout.flush()
    os._exit(0)  # leave without finalising the Popen of a child that keeps running


if __name__ == "__main__":
    main(sys.argv[1:])
