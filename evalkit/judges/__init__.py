"""Model judges and their agreement with people: human labels, calibration, pairwise judging,
judge gating and the published agreement data sets."""
