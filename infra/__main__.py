"""Pulumi entry point (`pulumi up` in infra/); the program lives in infra/program.py."""

from infra.program import main

main()
