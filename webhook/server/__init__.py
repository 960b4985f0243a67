"""The admission server: AdmissionReview over TLS in, ``webhook.engine.evaluate`` in the middle, JSON out.

The modules are kept small so each concern can be read (and tested) alone:

``review``           the AdmissionReview v1 wire contract (parse, shape responses); pure
``admission``        one review -> one engine call -> one response; failure policy, metrics, log line
``app``              the WSGI app: the apiserver's admission calls answered directly, the rest on Flask
                     (routes, JSON errors, health and readiness)
``runtime``          what a process holds (policy store, namespace source, TLS reloader) and its threads
``reload``           policy hot reload (content hash, atomic swap, last good policy keeps serving)
``tls``              the gunicorn ``ssl_context`` hook: cached context, rebuilt when file contents change
``namespaces``       namespace labels: none, a file, or (``namespace_watch``) a list/watch cache
``metrics``          Prometheus metrics (multiprocess) and the master's plain-HTTP exposition
``logs``             one JSON line per decision; gunicorn's lines as JSON too
``gunicorn_app``     the programmatic gunicorn application and its hooks
``settings``         the settings value ``serve`` builds from flags and ``GPU_ADMISSION_*``

Nothing here is imported by ``gpu-admission check``; ``serve`` imports it after pointing
prometheus_client at its multiprocess directory.
"""
