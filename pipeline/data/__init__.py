"""Corpus and benchmark readers, the data mirror and the download stage's fetching."""
