"""Where the inputs live and how they are listed: files (local and fsspec object stores), RAR archives, shared split lists and labels."""
