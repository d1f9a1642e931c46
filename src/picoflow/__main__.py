"""``python -m picoflow``: the ``picoflow`` command."""

from picoflow.cli import main

main()
