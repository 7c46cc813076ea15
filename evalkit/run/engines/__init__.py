"""Engines that schedule a run's chunks: today Ray (:mod:`evalkit.run.engines.ray_engine`,
the optional extra ``evalkit[ray]``), and the shared rate budget its workers draw from
(:mod:`evalkit.run.engines.budget`). Nothing here imports Ray until a Ray run starts."""
