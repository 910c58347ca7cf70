"""Metrics: retrieval (pytrec_eval), answers (cover-EM, F1_ans, EM-tol) and TANQ tables (RMS)."""
