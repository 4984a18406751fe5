"""Evaluation: STS under the SentEval protocol, MTEB, analysis metrics and inference cost."""
