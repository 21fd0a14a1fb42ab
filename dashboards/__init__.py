"""Dash + Plotly web UI over the perfbench store."""
