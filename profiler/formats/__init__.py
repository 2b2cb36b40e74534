"""Formats: measurement records and the files users already have, read into them."""
