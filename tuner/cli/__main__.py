"""`python -m tuner.cli`."""

from tuner.cli import main

main()
