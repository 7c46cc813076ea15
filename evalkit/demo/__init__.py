"""The offline simulator behind ``make demo``: a rule-based support-triage assistant (not an LLM)
served over OpenAI-compatible HTTP on 127.0.0.1, with a tool-calling agent and a judge persona."""
