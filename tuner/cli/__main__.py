"""`python -m tuner.cli`."""

from tuner.cli.commands import main

main()
