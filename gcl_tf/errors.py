"""User-facing errors: one line, exit status 2, no traceback; a run stopped by a signal: one
line, exit status 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
from __future__ import annotations

import functools
import re
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


class DiskError(UserError, OSError):
    """A file cannot be written (a full disk, an I/O error, no permission): an environmental
    fault, reported as one line like a user mistake. Also an OSError, for callers that catch those."""


class NotResumable(UserError):
    """``--resume`` cannot continue the run in a folder: ``reason`` says why, ``advice`` what to do."""

    def __init__(self, reason: str, advice: str):
        super().__init__(f"--resume: {reason}; {advice}")
        self.reason, self.advice = reason, advice

    @classmethod
    def no_checkpoint(cls, output_dir: str) -> "NotResumable":
        from gcl_tf.run_layout import checkpoint_dir

        return cls(f"no checkpoint to resume from in {checkpoint_dir(output_dir)}",
                   "run without --resume to start the run (with --overwrite if the folder holds checkpoint "
                   "files: they are deleted)")


class FolderBusy(UserError):
    """Another process holds the lock of an output folder."""


class OutOfMemory(UserError):
    """The run's buffers need more memory than the device has."""


# The command line's options a message may advise, as ``gcl_tf.run`` names them (its keywords).
API_WORDS = {"--output": "output_dir", "--overwrite": "overwrite=True", "--resume": "resume=True",
             "--init-from": "init_from"}
_OPTION = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, API_WORDS)) + r")(?![\w-])")


def in_api_words(error: UserError) -> UserError:
    """``error`` with the command-line options its message advises (``pass --overwrite``,
    ``choose another --output``) named as ``gcl_tf.run``'s keywords, for a caller of the Python
    API; the same exception, its message replaced."""
    text = _OPTION.sub(lambda match: API_WORDS[match.group(1)], str(error))
    error.args = (text, *error.args[1:])
    if isinstance(error, NotResumable):
        error.reason, error.advice = (_OPTION.sub(lambda m: API_WORDS[m.group(1)], part)
                                      for part in (error.reason, error.advice))
    return error


class Stopped(KeyboardInterrupt):
    """A run stopped on a signal (SIGTERM, Ctrl-C) after saving a checkpoint.

    A KeyboardInterrupt, so that code which stops on Ctrl-C (KerasTuner's trial loop, which
    records any Exception as a failed trial and goes on) stops on it too. Command-line entry
    points print the message (with :meth:`with_hint`'s way to resume) and exit with
    ``exit_status``: 128 + the signal's number, as a shell reports a process ended by it.
    """

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.message = message
        self.signum = int(signum)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

    def with_hint(self, hint: str) -> "Stopped":
        return Stopped(f"{self.message}; {hint}", self.signum)


def exit_on_user_error(main):
    """Decorate a CLI ``main``: a :class:`UserError` becomes one line on stderr and exit 2; a
    :class:`Stopped` run one line and its exit status."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except UserError as error:
            message = " ".join(str(error).split())  # exactly one line
            print(f"error: {message}", file=sys.stderr)
            sys.exit(USAGE_EXIT_CODE)
        except Stopped as stop:
            print(f"stopped: {' '.join(stop.message.split())}", file=sys.stderr)
            sys.exit(stop.exit_status)

    return wrapper
