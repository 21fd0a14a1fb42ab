"""Rendering for people: `show`'s report, the results table, `tune`'s terminal view, the merged trace."""
