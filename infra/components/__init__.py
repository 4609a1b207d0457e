"""One Pulumi ComponentResource per concern, one file each (reservations.py is a helper).

network.py (VPCs, subnets, NAT, firewall, GPU NIC networks), cluster.py (GKE control plane
and the Kubernetes provider), nodepools.py (CPU and GPU pools; reservations.py builds their
future reservations), multinetwork.py (GKENetworkParamSet/Network objects), storage.py
(buckets, registry), identity.py (service accounts and IAM), argocd.py (Argo CD and the
root Application).
"""

TYPE_PREFIX = "reve:infra"
