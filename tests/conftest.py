"""What ``pytest`` collects: ``tests/citus`` only for ``make test-citus``.

The Citus suite needs a stack home with a Citus coordinator and workers (Citus is
not installable from the package registries, so ``make test`` runs without it);
``make test-citus`` sets HANDOFF_TEST_CITUS=1 and points HANDOFF_HOME at such a home.
"""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("HANDOFF_TEST_CITUS") == "1" else ["citus"]
