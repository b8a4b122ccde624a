"""The errors a user meets as one line, not a traceback: bad input and an unready machine.

Library code raises these; the commands (:func:`xmr.options.user_errors`) print them as
``error: ...`` with exit code 2. No command-line library here, so the pipeline's executor and
the cluster can raise them without loading the command-line builder.
"""

from __future__ import annotations


class UnavailableError(RuntimeError):
    """Something xmr needs could not be started or reached (a local Ray on a busy machine, a
    cluster's node): the reason and what to try, in one line."""


USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    LookupError,
    ImportError,
    UnavailableError,
)
"""What bad input and an unready machine raise (``DataError`` is a ``ValueError``): one line,
not a traceback."""
