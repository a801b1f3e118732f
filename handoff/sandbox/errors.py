"""The sandbox provider's refusals: a stand-in third party, so its answers are its own
(an HTTP status and a code of its API), not Handoff's."""

from __future__ import annotations

from handoff.core.errors import HandoffError


class SandboxRefusal(HandoffError):
    """A request the sandbox provider answers with an error: its HTTP status and code."""

    def __init__(self, message: str, *, status: int = 400, code: str = "InvalidRequest") -> None:
        super().__init__(message)
        self.status = status
        self.answer_code = code


class InvalidFault(SandboxRefusal):
    """A fault request the sandbox provider cannot arm; the message says what to fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=400, code="InvalidFault")
