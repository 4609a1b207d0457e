"""One Pulumi ComponentResource per concern; each file declares one component.

network.py (VPCs, subnets, NAT, firewall, GPU NIC networks), cluster.py (GKE control plane
and the Kubernetes provider), nodepools.py (CPU and GPU pools, future reservations),
multinetwork.py (GKENetworkParamSet/Network objects), storage.py (buckets, registry),
identity.py (service accounts and IAM), argocd.py (Argo CD and the root Application).
"""

TYPE_PREFIX = "reve:infra"
