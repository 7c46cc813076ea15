"""The harness version recorded in every run manifest."""

__version__ = "0.1.0"
