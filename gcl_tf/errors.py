"""User-facing errors: one line, exit status 2, no traceback."""
from __future__ import annotations

import functools
import sys

USAGE_EXIT_CODE = 2


class UserError(Exception):
    """A mistake of the user (bad config, missing data, corrupt file).

    The message is one line that says what is wrong and what is allowed.
    Command-line entry points print it and exit with status 2.
    """


class ConfigError(UserError):
    """An invalid configuration key, type or value."""


class DataError(UserError):
    """Missing, corrupt or inconsistent input data."""


class TrainingError(UserError):
    """Training cannot go on (for example a non-finite loss)."""


def exit_on_user_error(main):
    """Decorate a CLI ``main``: a :class:`UserError` becomes one line on stderr and exit 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except UserError as error:
            message = " ".join(str(error).split())  # exactly one line
            print(f"error: {message}", file=sys.stderr)
            sys.exit(USAGE_EXIT_CODE)

    return wrapper
