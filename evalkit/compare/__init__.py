"""From stored results to a decision: verdicts, paired frame, slices, comparability, gate,
flakes, report and charts."""
