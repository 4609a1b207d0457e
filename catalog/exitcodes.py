"""Exit codes every command-line entry point shares (runner, warden, infra.plan).

They live beside `catalog.errors` so that programs which are not the CLI (the Pulumi
program, Warden) import no CLI code; `docs/runner.md` lists them too.
"""

OK = 0
FAILURE = 1  # the work ran and failed (a check failed, a run crashed, the API refused)
USAGE = 2  # bad input: a flag, a file or a field; nothing was written
DIFFERS = 3  # `render --check`: apps/ differs from what the run definitions render
NOT_FOUND = 4  # the run, pod or node named does not exist
