"""The HTTP service: emit endpoints, the SQL read model and query API, the web UI."""
