"""The real control plane the end-to-end tier runs: built from the Go module proxy, started on loopback."""
