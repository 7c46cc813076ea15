"""From stored results to a decision: verdicts, paired frame, slices, comparability, the pinned
exam, flakes and the gate. How a decision is shown lives in `evalkit.report`."""
