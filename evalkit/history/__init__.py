"""A configuration's runs over time: pass-rate and flake trends, unstable cases and how often a
baseline has been reused, read from the store's history queries."""
