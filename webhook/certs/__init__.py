"""Certificates for the admission server: a private CA, the serving pair and the ``caBundle``.

The API server dials ``https://<svc>.<ns>.svc`` and verifies the serving certificate against the
webhook configuration's ``caBundle``; this package produces both halves (``generate``) and keeps the
bundle honest during a CA rotation (``bundle``). ``inject`` talks to the Kubernetes API.
"""

from webhook.certs.generate import (
    CertInfo,
    GenerateResult,
    describe,
    format_description,
    generate,
    service_sans,
)

__all__ = ["CertInfo", "GenerateResult", "describe", "format_description", "generate", "service_sans"]
