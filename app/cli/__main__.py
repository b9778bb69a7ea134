"""``python -m app.cli``: the same as the ``tierops`` command."""

from app.cli import main

main()
