"""Where the inputs live and how they are listed.

Files (local and fsspec object stores), RAR archives, shared split lists and labels.
"""
