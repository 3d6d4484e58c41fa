"""The benchmark sections, one module per `make bench` section, each named for its key in results.json."""
