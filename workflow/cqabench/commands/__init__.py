"""Subcommands of `cqabench`, one module per workflow stage; each exposes `register(subparsers)`."""
