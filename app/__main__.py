"""``python -m app``: the same as the ``tierops`` command (issue #10)."""

from app.cli import main

main()
