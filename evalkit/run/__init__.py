"""Asking the system under test: runner, providers, response cache, rescore."""
