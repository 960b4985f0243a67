"""``--apply-reports``: write the reports with server-side apply (field manager ``gpu-admission``).

Server-side apply makes each run declare the whole report: fields it no longer sends (results that
went away) are removed, and ``force`` takes the fields over from any earlier manager (a ``kubectl
apply`` by hand). A namespace whose earlier report this run has nothing for gets an empty report
(summary all zero) rather than keeping yesterday's findings; nothing is deleted, so the audit's
account needs no delete permission.
"""

from __future__ import annotations

from webhook.audit.kube import Discovery, Kube, KubeError
from webhook.audit.openreports import API_VERSION, FIELD_MANAGER, MANAGED_BY, NAME, ReportBuilder, report_path

GROUP, VERSION = API_VERSION.split("/")


def existing_report_namespaces(kube: Kube) -> list[str]:
    """Namespaces holding a ``gpu-admission`` Report written by an earlier run (by its label)."""
    selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
    out: list[str] = []
    token = ""
    while True:
        query = [("labelSelector", selector), ("limit", "500")]
        if token:
            query.append(("continue", token))
        data = kube.get(f"/apis/{API_VERSION}/reports", query) or {}
        for item in data.get("items") or ():
            meta = item.get("metadata") or {}
            if meta.get("name") == NAME and meta.get("namespace"):
                out.append(meta["namespace"])
        token = (data.get("metadata") or {}).get("continue") or ""
        if not token:
            return out


def apply_reports(kube: Kube, builder: ReportBuilder, namespace: str | None = None) -> int:
    """Apply every report; the number written. Raises :class:`KubeError` when the CRDs are missing."""
    discovery = Discovery(kube)
    if discovery.find(API_VERSION, "Report") is None:
        raise KubeError(
            f"--apply-reports: the cluster does not serve {API_VERSION} reports: install the OpenReports "
            "CRDs (github.com/openreports/reports-api, config/crd) or drop --apply-reports"
        )
    stale = [ns for ns in existing_report_namespaces(kube) if namespace in (None, ns)]
    docs = builder.documents(also=stale)
    if any(d["kind"] == "ClusterReport" for d in docs) and discovery.find(API_VERSION, "ClusterReport") is None:
        raise KubeError(f"--apply-reports: the cluster does not serve {API_VERSION} clusterreports: install its CRD")
    for doc in docs:
        kube.server_side_apply(report_path(doc), doc, FIELD_MANAGER)
    return len(docs)
