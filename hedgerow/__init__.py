"""Hedgerow: serve text-embedding models on Kubernetes, fast.

The root package holds what every process shares: the CLI entry point, the settings helper,
logging and the small set of errors that every interface translates in one place. It knows
nothing about torch, gRPC or HTTP.
"""

__version__ = "0.1.0"
