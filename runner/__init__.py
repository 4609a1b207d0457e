"""`runner`: the researcher's command-line tool (the report's "GKR").

Resolves run definitions into RayJob / RayCluster / Job manifests, writes them into
`apps/` for a pull request, runs them locally, and inspects and preflights runs.
Start-up stays light: nothing here imports torch, ray or pulumi at module level.
"""
