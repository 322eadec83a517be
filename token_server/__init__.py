"""Token server: mints short-lived LiveKit tokens and serves the browser call page (web/).

Imports neither `agent` nor `tts_engine`.
"""
