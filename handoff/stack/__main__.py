"""``python -m handoff.stack`` is the ``handoff`` command."""

from handoff.stack.cli import main

main()
