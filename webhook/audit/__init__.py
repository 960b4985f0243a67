"""``gpu-admission audit``: the engine over what a cluster already holds, reported for people and tools.

An edge like ``check``: it reads (a live cluster through the Kubernetes API, or a snapshot), hands
each object to the engine through :func:`webhook.audit.judge.judge`, and reports (text, JSON, JUnit,
OpenReports). The engine alone decides.
"""
