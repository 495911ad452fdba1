"""The pool-manager contract (../shared/contracts/llama-orch-worker.md): route.py serves /health, /v1/ready,
/execute and /cancel, request.py reads a job, schema.py is the contract's part of /openapi.json."""

from worker.api.orch.route import routes

__all__ = ["routes"]
