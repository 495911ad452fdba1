"""The one exception type that reaches the user as a single line."""


class WorkerError(Exception):
    """A failure the user can act on: the message says what happened and what to do.

    The CLI prints it as one line and exits non-zero, with no traceback.
    """
