"""Tools for the platform add-ons under `kustomize/`: generate, build, validate, diff.

python -m kustomize.tooling.generate [--check]   write (or check) the generated YAML
scripts/validate                                  build and validate every overlay
scripts/overlay-diff REV1 REV2                    diff of rendered overlays between revisions
"""
