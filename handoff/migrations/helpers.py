"""What the revision files share.

Most revisions are two SQL files beside them, the change and what undoes it
(``upgrade, downgrade = sql_steps(__file__)``): partial indexes, grants, row-level
security and server-side functions read best as the SQL they are. The functions'
current text lives in ``handoff/sql/<family>.sql``; a revision that changes a
function edits its family's file and applies it with :func:`apply_family`, and a
downgrade that must put back an earlier revision's function takes it from that
revision's SQL with :func:`function_from`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from alembic import op

VERSIONS = Path(__file__).resolve().parent / "versions"
FAMILIES = Path(__file__).resolve().parent.parent / "sql"


def sql_steps(revision_file: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """``upgrade`` and ``downgrade`` of a revision that is two SQL files beside it:
    ``<revision>.sql`` and ``<revision>.down.sql``."""
    here = Path(revision_file)
    return _runs(here.with_suffix(".sql")), _runs(here.with_suffix(".down.sql"))


def sql_beside(revision_file: str) -> Callable[[], None]:
    """An ``upgrade`` that runs ``<revision>.sql`` (the revision writes its own downgrade)."""
    return _runs(Path(revision_file).with_suffix(".sql"))


def _runs(sql: Path) -> Callable[[], None]:
    def step() -> None:
        op.execute(sql.read_text())

    step.__doc__ = f"Runs {sql.name}."
    return step


def family_sql(family: str) -> str:
    """The text of one function family's file (``handoff/sql/<family>.sql``)."""
    return (FAMILIES / f"{family}.sql").read_text()


# A line a later revision added to a family file, marked "-- since 0018_index_plans".
SINCE = re.compile(r"^.*--\s*since (\d{4})_\w+.*\n", re.M)


def apply_family(family: str, revision: str | None = None) -> None:
    """Applies a family's file (every function ``CREATE OR REPLACE``).

    The file holds today's text, so an older revision that applies it does so with the
    newest definitions on an old database's way up. That is harmless while they need
    nothing a later revision creates (a function body is checked against the tables as
    it is created); ``make test`` upgrades a fresh database from the first revision on
    every run, so a break shows at once. Then freeze: copy the text the earlier revision
    needs into its own ``.sql`` before changing the family.

    A change of whole lines outside the bodies (a SET clause) needs no copy: the line
    ends ``-- since <revision>``, and an older ``revision`` applying the file leaves it
    out, so each revision's schema stays what its downgrade puts back.
    """
    op.execute(as_of(family_sql(family), revision))


def apply_frozen(revision_sql: str, revision: str | None = None) -> None:
    """Applies ``versions/<revision_sql>``, functions frozen as an earlier revision has them
    (a later revision changed them in their family's file), as of ``revision``."""
    op.execute(as_of((VERSIONS / revision_sql).read_text(), revision))


def as_of(text: str, revision: str | None) -> str:
    """``text`` without the lines marked as added after ``revision`` (None: all of it)."""
    if revision is None:
        return text
    below = int(revision[:4])
    return SINCE.sub(lambda line: "" if int(line[1]) > below else line[0], text)


def function_from(revision_sql: str, function: str) -> str:
    """One function's ``CREATE OR REPLACE`` statement as an earlier revision's SQL file
    (``versions/<revision_sql>``) defines it, for a downgrade that puts it back."""
    text = (VERSIONS / revision_sql).read_text()
    start = re.search(
        rf"^CREATE (?:OR REPLACE )?FUNCTION handoff\.{re.escape(function)}\(", text, re.M
    )
    if start is None:
        raise LookupError(f"{revision_sql} defines no function handoff.{function}")
    body = text.index("AS $$", start.start())
    end = text.index("$$;", body + len("AS $$")) + len("$$;")
    statement = text[start.start() : end]
    return re.sub(r"^CREATE (?:OR REPLACE )?", "CREATE OR REPLACE ", statement, count=1)
