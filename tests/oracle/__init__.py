"""An independent model of kube-scheduler's filters, and property tests of the webhook against it.

This package is a *second opinion* on where a pod can run. It is written from Kubernetes' documented
behaviour and source, and deliberately imports nothing of the engine's own reachability reasoning
(``webhook/engine/reach.py``, the placement rules): if both were built from the same code, a mistake
in one would be a mistake in the other and no test would see it. The engine is only ever run as the
API server runs it (``/mutate``, its JSON patch applied, then ``/validate`` on the stored object).

- :mod:`tests.oracle.scheduler`: the filters (NodeAffinity, TaintToleration, NodeResourcesFit for
  extended resources) over plain Pod and Node dicts;
- :mod:`tests.oracle.cluster`: Nodes generated from a policy's YAML (read here, not through the
  engine's compiled policy), entitlements read the same way;
- :mod:`tests.oracle.controllers`: the pods Kubernetes' controllers create from a workload;
- ``test_scheduler.py``: the oracle against documented Kubernetes behaviour;
- ``test_properties.py``: hypothesis properties of the webhook judged by the oracle.
"""
