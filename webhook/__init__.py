"""gpu-admission: a Kubernetes admission webhook that turns GPU workload intent into the cluster's spec."""

__version__ = "0.1.0"
