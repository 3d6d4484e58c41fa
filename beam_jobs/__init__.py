"""Runner launchers: the only place that knows about Beam runners."""
