"""Importers: cases brought in from where they already live (JSONL/CSV rows, OpenAI chat logs,
promptfoo configs, Inspect AI logs), written as ``review: draft`` case YAML by
:func:`evalkit.corpus.importers.draft_cases.write_import`."""
