"""``python -m handoff.stack._moto PORT MARKER``: moto's DynamoDB server for the local stack.

A module of ours rather than ``python -m moto.server`` for two reasons. The
process carries the stack's home marker on its command line (how the stack
tells its own processes from others), which moto's argument parser would
refuse. And it serves one request at a time: moto's backend does not
isolate concurrent requests (two racing transactions could both pass their
conditions), while DynamoDB does; serialising them keeps the contract's
concurrency semantics, at a speed nobody should quote (see stack/dynamodb.py).
"""

from __future__ import annotations

import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple

if __name__ == "__main__":
    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", int(sys.argv[1]), app, threaded=False)
