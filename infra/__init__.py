"""Infrastructure as code: one Pulumi stack per cluster in clusters/ (docs/infra.md).

cd infra && pulumi stack select ultra-usc1 && pulumi preview   # with the Pulumi CLI
python -m infra.plan ultra-usc1                                  # offline, under mocks
"""
