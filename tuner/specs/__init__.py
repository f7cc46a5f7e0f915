"""Candidates and the transform-dialect tuning specs that apply them."""
