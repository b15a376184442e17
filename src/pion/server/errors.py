"""The server's error texts, in one table (Redis's wording where Redis has one).

Handlers raise ``CommandError(text, code)``; the texts below are the ones more than one
place writes, so a client that matches on them (redis-py maps the code prefix; some
tools match the text) sees exactly one spelling. Builders exist for the texts that carry
a detail: ``syntax_error_near``, ``oom_error``, ``wal_misconf``, ``codec_error`` (the one
place a codec's ``CodecError`` becomes a ``CommandError``).
"""

from __future__ import annotations

from pion.common.errors import CodecError, CommandError, clip_for_echo

NOT_AN_INTEGER = "value is not an integer or out of range"
NOT_A_FLOAT = "value is not a valid float"
SYNTAX_ERROR = "syntax error"
OOM_MAXMEMORY = "command not allowed when used memory > 'maxmemory'."
WRONGPASS = "invalid username-password pair or user is disabled."


def syntax_error_near(arg: bytes) -> CommandError:
    return CommandError(f"{SYNTAX_ERROR} near '{clip_for_echo(arg)}'")


def oom_error() -> CommandError:
    """A write that cannot fit under ``--maxmemory`` even after eviction."""
    return CommandError(OOM_MAXMEMORY, code="OOM")


def wal_misconf(wal_name: str, reason: str) -> CommandError:
    """A write refused because the WAL cannot be written or fsynced (Redis's -MISCONF)."""
    return CommandError(f"Errors writing to the WAL ({wal_name}): {reason}. Writes are refused until "
                        "the WAL can be written again; reads keep working.", code="MISCONF")


def codec_error(exc: CodecError) -> CommandError:
    """A storage format refused the rows (bad dim, NaN in a quantized format, short blob)."""
    return CommandError(str(exc))


def token_group_error(fmt: str, group: int, start_id: int, end_id: int, n_rows: int) -> CommandError:
    """A V.STOREBATCH that would split a token group of a kivi format (issue 20)."""
    return CommandError(f"{fmt} stores rows in groups of {group} tokens: a batch must start at a multiple of "
                        f"{group} and end at one or at/after the layer's end ({n_rows} rows), and one that "
                        f"rewrites the group before a partial tail must rewrite the tail too; got rows "
                        f"{start_id}..{end_id}")
