"""A configuration's runs over time: pass-rate and flake trends, unstable cases and how often a
baseline has been reused, read from the store's history queries. (Named ``trends``, not
``history``: a subpackage named like the public ``evalkit.history`` function would replace it
as an attribute of ``evalkit`` once imported.)"""
