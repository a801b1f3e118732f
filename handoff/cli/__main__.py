"""``python -m handoff.cli`` is the ``handoff`` command."""

from handoff.cli import main

main()
