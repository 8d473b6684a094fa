"""Errors a user can act on.

Every failure caused by input (a file, a parameter, an instrument) raises a
:class:`NicrigError` subclass with a message that names the culprit; the CLI
prints it as one line ``nicrig: error: ...`` and exits with ``exit_code``.
"""


class NicrigError(Exception):
    """Base class: a clear, one-line problem the user can fix."""

    exit_code = 2


class UsageError(NicrigError):
    """Impossible or unknown parameters (profile names, sizes, spacings)."""


class FormatError(NicrigError):
    """A file that is not, or no longer, what it claims to be."""
