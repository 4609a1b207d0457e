"""KubeRay CRD field lists (kuberay.json) and the script that derives them (derive.py)."""
