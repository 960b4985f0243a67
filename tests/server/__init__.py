"""Admission server tests: real gunicorn over TLS, real kubernetes client against a local list/watch server."""
